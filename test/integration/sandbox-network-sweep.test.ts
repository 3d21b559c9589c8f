/**
 * A sandbox network outlives nothing it belongs to: when a workspace root is deleted with sandboxes still in it (a
 * test's temporary root, an operator's rm -rf), the next runtime on the host, whatever its root, deletes their
 * network namespaces (sandbox-network.ts keeps a host-wide registry of the lease records in /run). Skipped, with the
 * reason, where sandboxes cannot have networks of their own.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SandboxNetwork } from "../../src/adapters/runtimes/process/sandbox-network.ts";

const roots: string[] = [];
const make = (): SandboxNetwork | string => {
  const root = mkdtempSync(join(tmpdir(), "net-sweep-"));
  roots.push(root);
  return SandboxNetwork.create(
    { root, searchPath: "/usr/sbin:/usr/bin:/sbin:/bin", log: () => {} },
    process.getuid?.() === 0,
  );
};
const first = make();
const skip = typeof first === "string" ? first : null;

afterAll(() => {
  for (const root of roots) rmSync(root, { recursive: true, force: true });
});

describe("sandbox networks of a deleted workspace root", () => {
  it("are deleted by the next runtime's sweep on the host; a live root's are kept", async (ctx) => {
    if (skip !== null || typeof first === "string") return ctx.skip(`no sandbox networks here: ${skip}`);
    const gone = await first.lease("orphan");
    const second = make();
    if (typeof second === "string") throw new Error(second);
    const kept = await second.lease("live");
    expect(existsSync(`/run/netns/${gone.name}`)).toBe(true);
    // The first root goes with its lease records, its namespace left behind.
    rmSync(roots[0] as string, { recursive: true, force: true });
    const third = make();
    if (typeof third === "string") throw new Error(third);
    await third.sweep(new Set());
    expect(existsSync(`/run/netns/${gone.name}`)).toBe(false);
    expect(existsSync(`/run/netns/${kept.name}`)).toBe(true);
    await second.release("live");
    expect(existsSync(`/run/netns/${kept.name}`)).toBe(false);
    for (const n of [first, second, third]) n.close();
  });
});

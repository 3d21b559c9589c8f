// The soak (bench/soak.ts, `npm run soak`) in a short version: two users, two rounds of 30 s of load against a real
// server process, with a kill -9 and restart half-way through the first; every verdict must hold: no acknowledged
// write lost, no 5xx, store, runtime and API agree after the sweep, nothing left after cleanup, store and fds back
// near their baseline, RSS after the second cleanup within 10 MiB of RSS after the first, and a settings read's
// handler-to-answer p50 on the server within 1.5x across REST, Connect and gRPC (docs/performance.md, "Reads under
// mixed load").
import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "..", "..");

describe("soak", () => {
  it("2 rounds of 30 s, 2 users, kill -9 and restart: every verdict holds", async () => {
    const child = spawn(
      process.execPath,
      [
        join(ROOT, "bench/soak.ts"),
        "--duration",
        "30",
        "--rounds",
        "2",
        "--users",
        "2",
        "--sweep-ms",
        "2000",
        // Two of the server's 10 s utilization samples: the idle one after the load gives memory back.
        "--idle-ms",
        "25000",
        "--json",
      ],
      { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] },
    );
    let out = "";
    let err = "";
    child.stdout.setEncoding("utf8").on("data", (c: string) => {
      out += c;
    });
    child.stderr.setEncoding("utf8").on("data", (c: string) => {
      err += c;
    });
    const code = await new Promise<number | null>((r) => child.once("exit", r));
    const last = out.trim().split("\n").at(-1) ?? "";
    let result: { operations: number; verdicts: { name: string; ok: boolean; detail: string }[] };
    try {
      result = JSON.parse(last);
    } catch {
      throw new Error(`no result line (exit ${code}):\n${out}\n${err}`);
    }
    expect(result.operations).toBeGreaterThan(200);
    expect(
      result.verdicts.some((v) => v.name.startsWith("a settings read costs the same on every protocol")),
    ).toBe(true);
    const failed = result.verdicts.filter((v) => !v.ok);
    expect(failed, out).toEqual([]);
    expect(code).toBe(0);
  }, 300_000);
});

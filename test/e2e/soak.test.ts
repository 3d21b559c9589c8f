// The soak (bench/soak.ts, `npm run soak`) in a short version: two users, two rounds of 30 s of load against a real
// server process, with a kill -9 and restart half-way through the first; every verdict must hold: no acknowledged
// write lost, no 5xx, store, runtime and API agree after the sweep, nothing left after cleanup, store and fds back
// near their baseline, and RSS after the second cleanup within 10 MiB of RSS after the first. The verdict on the
// settings read's cost per protocol is a performance figure of the machine's load (docs/performance.md, "Reads
// under mixed load"): it is reported, not asserted here.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "..", "..");

describe("soak", () => {
  it("2 rounds of 30 s, 2 users, kill -9 and restart: every verdict holds (the read cost per protocol aside)", async () => {
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
    const readCost = (v: { name: string }) =>
      v.name.startsWith("a settings read costs the same on every protocol");
    expect(result.verdicts.some(readCost)).toBe(true);
    const failed = result.verdicts.filter((v) => !v.ok && !readCost(v));
    expect(failed, out).toEqual([]);
    // Exit status 1 when a verdict fails: here only the read-cost one may have.
    expect(code).toBe(result.verdicts.every((v) => v.ok) ? 0 : 1);
  }, 300_000);
});

import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LOG_FLUSH_DELAY_MS, LogDestination } from "../../src/server/log-destination.ts";

const dir = mkdtempSync(join(tmpdir(), "log-destination-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const MODULE = join(import.meta.dirname, "..", "..", "src", "server", "log-destination.ts");

describe("LogDestination", () => {
  it("writes buffered lines together, in order, once the flush delay has passed", async () => {
    const file = join(dir, "delay.log");
    const log = new LogDestination(openSync(file, "a"));
    log.write("one\n");
    await new Promise((resolve) => setImmediate(resolve));
    log.write("two\n");
    expect(readFileSync(file, "utf8")).toBe(""); // buffered across turns
    await new Promise((resolve) => setTimeout(resolve, LOG_FLUSH_DELAY_MS + 20));
    expect(readFileSync(file, "utf8")).toBe("one\ntwo\n");
    log.write("three\n");
    await new Promise((resolve) => setTimeout(resolve, LOG_FLUSH_DELAY_MS + 20));
    expect(readFileSync(file, "utf8")).toBe("one\ntwo\nthree\n");
  });

  it("writes whole lines, at most 4 KiB at once: a batch goes out when the next line would not fit", () => {
    const file = join(dir, "batch.log");
    const log = new LogDestination(openSync(file, "a"));
    const line = `${"x".repeat(99)}\n`;
    for (let i = 0; i < 40; i++) log.write(line);
    expect(readFileSync(file, "utf8")).toBe(""); // 4,000 bytes buffered
    log.write(line); // 4,100 would not fit: the 40 lines go out, this one waits
    expect(readFileSync(file, "utf8")).toBe(line.repeat(40));
    log.write("y".repeat(3994)); // 100 + 3,994 = 4,094 characters: still buffered
    expect(readFileSync(file, "utf8").length).toBe(4000);
    log.write("z\n"); // fills 4 KiB exactly: written at once
    expect(readFileSync(file, "utf8")).toBe(`${line.repeat(41)}${"y".repeat(3994)}z\n`);
    log.write("tail é\n");
    log.flush();
    expect(readFileSync(file, "utf8").endsWith("z\ntail é\n")).toBe(true);
  });

  it("writes a batch that non-ASCII text made longer than 4 KiB line by line, losing nothing", () => {
    const file = join(dir, "utf8.log");
    const log = new LogDestination(openSync(file, "a"));
    const line = `${"é".repeat(99)}\n`; // 100 characters, 199 bytes
    for (let i = 0; i < 40; i++) log.write(line);
    log.flush();
    expect(readFileSync(file, "utf8")).toBe(line.repeat(40));
  });

  it("keeps every line whole when several processes share one pipe and its reader falls behind", async () => {
    const script = `
      import { LogDestination } from ${JSON.stringify(MODULE)};
      const log = new LogDestination(1);
      const pad = "p".repeat(180);
      for (let i = 0; i < 3000; i++) log.write(JSON.stringify({ pid: process.pid, i, pad }) + "\\n");
    `;
    // Two writers on the write end of one pipe (the shell's), read only after a pause, so the pipe fills up.
    const child = spawn(
      "sh",
      [
        "-c",
        `"$0" --input-type=module -e "$1" & "$0" --input-type=module -e "$1" & wait`,
        process.execPath,
        script,
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    child.stdout.pause();
    await new Promise((resolve) => setTimeout(resolve, 300));
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => {
      out += d;
    });
    child.stdout.resume();
    await new Promise((resolve) => child.on("close", resolve));
    const lines = out.trimEnd().split("\n");
    expect(lines).toHaveLength(6000);
    const seen = new Map<number, number>();
    for (const l of lines) {
      const { pid, i } = JSON.parse(l) as { pid: number; i: number };
      expect(i).toBe(seen.get(pid) ?? 0); // in order, none lost, none cut
      seen.set(pid, i + 1);
    }
    expect(seen.size).toBe(2);
  });

  it("loses no line when the process exits in the same turn, or when the reader of its pipe goes away", () => {
    const script = `
      import { LogDestination } from ${JSON.stringify(MODULE)};
      const log = new LogDestination(1);
      for (let i = 0; i < 1000; i++) log.write("line " + i + "\\n");
      process.exit(0);
    `;
    const out = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
    expect(out.status).toBe(0);
    const lines = out.stdout.trimEnd().split("\n");
    expect(lines).toHaveLength(1000);
    expect(lines[999]).toBe("line 999");
  });

  it("stops writing quietly when the reader goes away (EPIPE), instead of crashing the process", async () => {
    const script = `
      import { LogDestination } from ${JSON.stringify(MODULE)};
      const log = new LogDestination(1);
      let turns = 0;
      const tick = () => {
        for (let i = 0; i < 100; i++) log.write("line\\n");
        if (++turns < 200) setTimeout(tick, 1); else { process.stderr.write("survived"); }
      };
      tick();
    `;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout.destroy();
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const code = await new Promise((resolve) => child.on("close", resolve));
    expect(stderr).toBe("survived");
    expect(code).toBe(0);
  });
});

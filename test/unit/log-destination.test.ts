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

  it("writes at once when 16 KiB are buffered, and on flush()", () => {
    const file = join(dir, "big.log");
    const log = new LogDestination(openSync(file, "a"));
    const line = `${"x".repeat(1023)}\n`;
    for (let i = 0; i < 15; i++) log.write(line);
    expect(readFileSync(file, "utf8")).toBe("");
    log.write(line);
    expect(readFileSync(file, "utf8").length).toBe(16 * 1024);
    log.write("tail é\n");
    log.flush();
    expect(readFileSync(file, "utf8").endsWith("tail é\n")).toBe(true);
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

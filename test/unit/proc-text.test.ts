import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { readProcText } from "../../agent/shared/proc-tree.ts";

describe("readProcText (one reusable buffer for /proc files)", () => {
  const dir = mkdtempSync(join(tmpdir(), "proc-text-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("reads a /proc file whose size reads as 0 to its end, as readFileSync does", () => {
    for (const name of ["environ", "cmdline", "mountinfo"]) {
      const path = `/proc/self/${name}`;
      expect(readProcText(path)).toBe(readFileSync(path, "latin1"));
    }
  });

  it("reads a file larger than its buffer whole, and the next small file without the previous bytes", () => {
    const big = Buffer.alloc(200 * 1024 + 17, "ab\0");
    writeFileSync(join(dir, "big"), big);
    writeFileSync(join(dir, "small"), "HOME=/w\0");
    expect(readProcText(join(dir, "big"))).toBe(big.toString("latin1"));
    expect(readProcText(join(dir, "small"))).toBe("HOME=/w\0");
    expect(readProcText(join(dir, "empty-missing"))).toBeNull();
  });
});

/**
 * Issue 38, F7: the commands the built-in agent runs share its uid, and where the host lets a process trace another
 * of its uid (no Yama, or ptrace_scope 0, as on this project's machines), they could read the agent's memory
 * (`/proc/<agent>/mem`) and find its session key there, and its model key and secrets. As root under bubblewrap
 * the agent runs from an execute-only copy of Node, which makes it non-dumpable: its /proc files are root's.
 * Skipped, with the reason, where sandboxes are not isolated as root.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BUILTIN_AGENT_COMMAND } from "../../agent/shared/builtin-agent.ts";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import type { RuntimeHandle } from "../../src/ports/sandbox-runtime.ts";

const root = mkdtempSync(join(tmpdir(), "hostile-agent-memory-"));
const runtime = createProcessRuntime({ workspaceRoot: root, stopGraceMs: 500 });
const skip =
  runtime.isolation.mode !== "bwrap"
    ? `sandboxes are not isolated here: ${runtime.isolation.reason}`
    : process.getuid?.() !== 0
      ? "not root: sandboxes share the server's uid"
      : null;
const key = randomBytes(16).toString("hex");
let handle: RuntimeHandle;

/** Runs a command in the sandbox through its agent; its stdout. */
async function run(command: string): Promise<string> {
  const res = await fetch(`${handle.agentUrl}/api/bash/execute_bash_command`, {
    method: "POST",
    headers: { "x-session-api-key": key, "content-type": "application/json" },
    body: JSON.stringify({ command, timeout: 60 }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { stdout: string }).stdout;
}

// Scans every readable mapping of the agent's memory for the key, as repository code could.
const SCAN = `
const fs = require("fs");
const [pid, key] = process.argv.slice(1);
try {
  const maps = fs.readFileSync("/proc/" + pid + "/maps", "utf8").trim().split("\\n");
  const fd = fs.openSync("/proc/" + pid + "/mem", "r");
  let found = false;
  for (const line of maps) {
    const [range, perms] = line.split(" ");
    if (!perms.startsWith("r")) continue;
    const [a, b] = range.split("-").map((x) => BigInt("0x" + x));
    if (b - a > 256n << 20n) continue;
    const buf = Buffer.alloc(Number(b - a));
    try { fs.readSync(fd, buf, 0, buf.length, a); } catch { continue; }
    if (buf.includes(key)) { found = true; break; }
  }
  console.log(found ? "FOUND" : "not found");
} catch (e) { console.log(e.code); }
`;

beforeAll(async () => {
  if (skip !== null) return;
  handle = await runtime.start({
    sandboxId: randomBytes(8).toString("hex"),
    spec: { id: "memory-test", command: [BUILTIN_AGENT_COMMAND], initialEnv: {}, workingDir: "" },
    sessionApiKey: key,
  });
  expect(await runtime.waitHealthy(handle, 60_000)).toBe(true);
}, 90_000);

afterAll(async () => {
  if (skip === null) await runtime.remove(handle).catch(() => {});
  await runtime.close();
  rmSync(root, { recursive: true, force: true });
});

describe("the agent's memory, from the commands it runs (issue 38, F7)", () => {
  it("is not readable: no /proc/<agent>/mem, environ or maps for its uid, and the key is not found", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    // The command's parent is the agent (a command's shell is its child).
    expect(await run("tr '\\0' ' ' < /proc/$PPID/cmdline")).toContain("agent/main");
    expect(await run(`${process.execPath} -e '${SCAN}' $PPID ${key}`)).toBe("EACCES\n");
    expect(await run("cat /proc/$PPID/environ >/dev/null 2>&1 && echo readable || echo refused")).toBe(
      "refused\n",
    );
    // Its own commands are ordinary processes: one reads its own memory (where the key is, in its arguments).
    expect(await run(`${process.execPath} -e '${SCAN}' self ${key}`)).toBe("FOUND\n");
  }, 60_000);
});

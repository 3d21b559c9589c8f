/**
 * Issue 38 through the service, two users each with a process sandbox of their own (bubblewrap as root, the
 * built-in agent, started cold by the service). Where the sandboxes share the host's network (SANDBOX_NETWORK=host,
 * or no network of their own here), each reaches the other's agent port and the host's loopback; in networks of
 * their own (the default as root), it tries the other's agent at its address and the host at its gateway and on
 * 127.0.0.1. Either way, what one user's sandbox does there must not reach the other's agent (F1: its own agent's
 * inspector opened by SIGUSR1; F4: idle connections taking the agent's descriptors, the service's health probe
 * failing), nor can its own commands read its agent's key from /proc (F7).
 * Skipped, with the reason, where the sandboxes are not isolated under their own uids.
 */
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import { directAgentUrl, gatewayOf, UNREACHABLE } from "../helpers/agent-address.ts";
import { agentPid, bash, type Party, party, probe, sandboxOf } from "../helpers/sandbox-parties.ts";
import { startTestApp, type TestApp } from "../helpers/test-app.ts";

const root = mkdtempSync(join(tmpdir(), "hostile-agent-ports-"));
let t: TestApp;
let skip: string | null = null;
let alice: Party;
let bob: Party;
const node = process.execPath;

/** The user's party, its agent at the direct URL the runtime's network gives. */
async function directParty(user: string): Promise<Party> {
  const p = await party(t, user);
  expect(p.agent).toMatch(directAgentUrl((t.runtime as ProcessRuntime).network));
  return p;
}

const isolated = (): boolean => (t.runtime as ProcessRuntime).network.mode === "isolated";

beforeAll(async () => {
  t = await startTestApp({ dir: root, sweepIntervalMs: 0 });
  const runtime = t.runtime as ProcessRuntime;
  if (runtime.isolation.mode !== "bwrap")
    skip = `sandboxes are not isolated here: ${runtime.isolation.reason}`;
  else if (process.getuid?.() !== 0) skip = "sandboxes share the server's uid when it is not root";
  if (skip !== null) {
    console.log(`hostile agent ports: skipped: ${skip}`);
    return;
  }
  alice = await directParty("alice");
  bob = await directParty("bob");
}, 60_000);

afterAll(async () => {
  await t?.close();
  rmSync(root, { recursive: true, force: true });
});

describe("one user's sandbox against another's agent (issue 38)", () => {
  it("F1: SIGUSR1 to its own agent opens no inspector that another user's sandbox could use", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    expect((await bash(alice, "kill -USR1 $PPID && echo sent")).stdout).toBe("sent\n");
    await new Promise((r) => setTimeout(r, 300));
    if (!isolated()) {
      // One network: alice's inspector would be on the loopback bob shares.
      const probe = await bash(
        bob,
        `${node} -e 'require("net").connect(9229, "127.0.0.1").on("connect", () => { console.log("inspector open"); process.exit(); }).on("error", (e) => console.log(e.code))'`,
      );
      expect(probe.stdout).toBe("ECONNREFUSED\n");
    } else {
      // Networks of their own: no inspector opened even on alice's own loopback, and bob reaches none of alice's
      // ports (her agent's included) at her address, nor the host's inspector port at his gateway or loopback.
      expect(await probe(alice, "127.0.0.1", 9229)).toBe("ECONNREFUSED");
      const aliceAddress = new URL(alice.agent).hostname;
      for (const [host, port] of [
        [aliceAddress, 9229],
        [aliceAddress, new URL(alice.agent).port],
        [gatewayOf(bob.agent), 9229],
        ["127.0.0.1", 9229],
      ] as const)
        expect(await probe(bob, host, port), `${host}:${port} from bob's sandbox`).toMatch(UNREACHABLE);
    }
    await t.app.sweep();
    expect((await sandboxOf(t, alice.key, alice.id))?.status).toBe("RUNNING");
  });

  it("F4: another user's 1500 idle connections leave the agent under its cap; the service's health probe passes", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    // Alice's agent where bob's sandbox would reach it: her port on the shared loopback, else her address.
    const { hostname, port } = new URL(alice.agent);
    const host = isolated() ? hostname : "127.0.0.1";
    if (isolated())
      expect(await probe(bob, host, port), "alice's agent from bob's sandbox").toMatch(UNREACHABLE);
    const flood = `for (let i = 0; i < 1500; i++) require("net").connect(${port}, "${host}").on("error", () => {}); setTimeout(() => process.exit(), 10000);`;
    expect((await bash(bob, `${node} -e '${flood}' >/dev/null 2>&1 & echo started`)).stdout).toBe(
      "started\n",
    );
    await new Promise((r) => setTimeout(r, 2000));
    const pid = agentPid(alice);
    const sockets = readdirSync(`/proc/${pid}/fd`).filter((fd) => {
      try {
        return readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith("socket:");
      } catch {
        return false;
      }
    }).length;
    expect(sockets).toBeLessThanOrEqual(256 + 8);
    await t.app.sweep();
    expect((await sandboxOf(t, alice.key, alice.id))?.status).toBe("RUNNING");
    // alice's own calls still go through.
    expect((await bash(alice, "echo still-mine")).stdout).toBe("still-mine\n");
  }, 60_000);

  it("F7: a sandbox's own commands find no session key in its agent's environment", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    for (const p of [alice, bob]) {
      // The agent's environment itself, as this test (root) reads it: its variables, and no key.
      const pid = agentPid(p);
      const environ = readFileSync(`/proc/${pid}/environ`, "latin1");
      expect(environ).toContain("HOME=");
      expect(environ).not.toContain(p.sandboxKey);
      // What its commands read of it: nothing where the agent is not dumpable (as root, it runs from an
      // execute-only copy of Node: its /proc files are root's), else the same variables without the key.
      const seen = await bash(p, "(tr '\\0' '\\n' < /proc/$PPID/environ) 2>/dev/null; echo rc=$?");
      expect(seen.stdout).not.toContain(p.sandboxKey);
      if (statSync(`/proc/${pid}/environ`).uid === 0) expect(seen.stdout).toBe("rc=1\n");
      else expect(seen.stdout).toMatch(/HOME=[\s\S]*rc=0\n$/);
    }
  });
});

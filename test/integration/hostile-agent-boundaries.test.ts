/**
 * Issue 38, the built-in agent's own boundaries and root's work in a workspace, against the process runtime as the
 * server runs it (bubblewrap as root, a loop-mounted workspace of its own size, a warm agent and a cold one): two
 * sandboxes, alice's (claimed from the warm pool) and bob's (started cold), each under a uid of its own.
 * - F1: a sandbox signals its agent with SIGUSR1; no inspector opens that another sandbox could connect to.
 *   Where sandboxes have networks of their own (the default as root), the other one also tries the first's address
 *   and its own gateway (the host); with the host's network shared, the loopback they share.
 * - F7: the agent's /proc environ, which its commands can read, holds no session key.
 * - F4: one sandbox's idle connections to the other's agent do not take its descriptors; /alive still answers
 *   (in networks of their own, the connections are refused: the other's agent is out of reach).
 * - F2: the agent's output goes to its workspace's disk, whose size bounds it; nothing grows on the host.
 * - F3: on a restart, a working directory the sandbox replaced with a symlink is refused, never chowned through.
 * - F10: a FIFO in place of a saved events.jsonl does not hold the restarted agent's start.
 * - F5: a descriptor of one sandbox's workspace file handed to another sandbox (an abstract unix socket) does not
 *   keep the deleted sandbox's disk alive: its holder is killed and the loop device detached before the removal ends.
 *   In networks of their own, abstract sockets are per namespace and the hand-over is refused; the descriptor is
 *   then relayed by a host process (root), so that another sandbox holds it all the same.
 * Skipped, with the reason, where bubblewrap cannot isolate sandboxes as root.
 */
import { spawnSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BUILTIN_AGENT_COMMAND } from "../../agent/shared/builtin-agent.ts";
import { listProcesses, readProcStat } from "../../agent/shared/proc-tree.ts";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import type { RuntimeHandle, RuntimeSpec } from "../../src/ports/sandbox-runtime.ts";
import { connectProbe, directAgentUrl, gatewayOf, UNREACHABLE } from "../helpers/agent-address.ts";
import { agentProcesses, cmdline } from "../helpers/agent-processes.ts";

const root = mkdtempSync(join(tmpdir(), "hostile-agent-boundaries-"));
const DISK = 64 * 1024 * 1024;
let runtime: ProcessRuntime;
let skip: string | null = null;

interface Sandbox {
  handle: RuntimeHandle;
  key: string;
  workspace: string;
}
let alice: Sandbox;
let bob: Sandbox;

const spec = (workingDir = ""): RuntimeSpec => ({
  id: "hostile",
  command: [BUILTIN_AGENT_COMMAND],
  initialEnv: {},
  workingDir,
});

async function start(id: string, workingDir = ""): Promise<Sandbox> {
  const key = `key-of-${id}-${"k".repeat(24)}`;
  const handle = await runtime.start({ sandboxId: id, spec: spec(workingDir), sessionApiKey: key });
  expect(handle.agentUrl).toMatch(directAgentUrl(runtime.network));
  expect(await runtime.waitHealthy(handle, 15_000)).toBe(true);
  return { handle, key, workspace: (handle.data as { workspace: string }).workspace };
}

/** Runs a command in the sandbox through its agent. */
async function bash(
  s: Sandbox,
  command: string,
  timeout = 60,
): Promise<{ exit_code: number; stdout: string }> {
  const res = await fetch(new URL("/api/bash/execute_bash_command", s.handle.agentUrl), {
    method: "POST",
    headers: { "x-session-api-key": s.key },
    body: JSON.stringify({ command, timeout }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { exit_code: number; stdout: string };
}

/** What a TCP connect from inside the sandbox to host:port gives ("connected", an error code, "timeout"). */
const probe = async (s: Sandbox, host: string, port: number | string): Promise<string> =>
  (await bash(s, `${node} -e '${connectProbe(host, port)}'`)).stdout.trim();

const isolated = (): boolean => runtime.network.mode === "isolated";

/** The pid of the sandbox's agent (the Node process running main.ts). */
function agentPid(s: Sandbox): number {
  const [agent] = agentProcesses(s.workspace);
  if (agent === undefined) throw new Error(`no agent in ${s.workspace}`);
  return agent.pid;
}

/** The runtime's restart (the process runtime has one). */
const restart = (handle: RuntimeHandle, request: Parameters<NonNullable<ProcessRuntime["restart"]>>[1]) => {
  if (!runtime.restart) throw new Error("no restart");
  return runtime.restart(handle, request);
};

/** Node, by the absolute path every sandbox sees read-only. */
const node = process.execPath;

beforeAll(async () => {
  if (process.getuid?.() !== 0) {
    skip = "needs root (sandboxes under their own uids)";
    return;
  }
  runtime = createProcessRuntime({
    workspaceRoot: join(root, "sandboxes"),
    warmAgents: 1,
    diskBytes: DISK,
    cgroups: "off",
    stopGraceMs: 500,
  });
  if (runtime.isolation.mode !== "bwrap") skip = `no bubblewrap here: ${runtime.isolation.reason}`;
  else if (!runtime.limits.disk.startsWith("loop"))
    skip = `no loop-mounted workspaces here: ${runtime.limits.disk}`;
  if (skip !== null) return;
  for (let i = 0; i < 400 && runtime.warmReady() < 1; i++) await new Promise((r) => setTimeout(r, 25));
  expect(runtime.warmReady()).toBe(1);
  // Both started in the same moment: alice's start takes the warm agent, bob's finds the pool empty (its next agent
  // still starting; one started after alice's was healthy could find it ready).
  [alice, bob] = await Promise.all([start("alice-sbx"), start("bob-sbx")]);
  // alice's agent was the warm one (its folder is the pool's), bob's started cold.
  expect(alice.workspace).toMatch(/\/ws-[A-Za-z0-9]{20}$/);
  expect(bob.workspace).toBe(join(root, "sandboxes", "bob-sbx"));
}, 60_000);

afterAll(async () => {
  await runtime?.killAll();
  rmSync(root, { recursive: true, force: true });
});

describe.skipIf(process.getuid?.() !== 0)("the built-in agent's boundaries (issue 38)", () => {
  it("F1: SIGUSR1 from inside a sandbox opens no inspector another sandbox reaches; the agent lives on", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    for (const [self, other] of [
      [alice, bob],
      [bob, alice],
    ] as const) {
      expect((await bash(self, "kill -USR1 $PPID && echo sent")).stdout).toBe("sent\n");
      await new Promise((r) => setTimeout(r, 300));
      if (!isolated()) {
        // One network: an inspector of self's agent would be on the loopback the other shares.
        const probed = await bash(
          other,
          `${node} -e 'require("net").connect(9229, "127.0.0.1").on("connect", () => { console.log("inspector open"); process.exit(); }).on("error", (e) => console.log(e.code))'`,
        );
        expect(probed.stdout).toBe("ECONNREFUSED\n");
      } else {
        // Networks of their own: no inspector even on self's own loopback, and the other reaches none of self's
        // ports (its agent's included) at its address, nor the host's inspector port at its gateway or loopback.
        expect(await probe(self, "127.0.0.1", 9229)).toBe("ECONNREFUSED");
        const address = new URL(self.handle.agentUrl).hostname;
        for (const [host, port] of [
          [address, 9229],
          [address, self.handle.port as number],
          [gatewayOf(other.handle.agentUrl), 9229],
          ["127.0.0.1", 9229],
        ] as const)
          expect(await probe(other, host, port), `${host}:${port} from the other sandbox`).toMatch(
            UNREACHABLE,
          );
      }
      expect((await fetch(new URL("/alive", self.handle.agentUrl))).status).toBe(200);
      // Started so that no signal opens it, from Node's first instruction on.
      expect(cmdline(agentPid(self))).toContain("--disable-sigusr1");
    }
  });

  it("F7: the agent's environ, readable by its commands, holds no session key (warm and cold)", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    for (const s of [alice, bob]) {
      // The agent's environment itself, as this test (root) reads it: its variables, and no key.
      const pid = agentPid(s);
      const environ = readFileSync(`/proc/${pid}/environ`, "latin1").replaceAll("\0", "\n");
      expect(environ).toContain(`HOME=${s.workspace}`);
      expect(environ).not.toContain(s.key);
      expect(environ).not.toMatch(/SESSION_API_KEY|OH_SESSION_API_KEYS/);
      // What its commands read of it: nothing where the agent is not dumpable (as root, it runs from an
      // execute-only copy of Node: its /proc files are root's), else that same environment.
      const seen = await bash(s, "(tr '\\0' '\\n' < /proc/$PPID/environ) 2>/dev/null; echo rc=$?");
      expect(seen.stdout).not.toContain(s.key);
      if (statSync(`/proc/${pid}/environ`).uid === 0) expect(seen.stdout).toBe("rc=1\n");
      else expect(seen.stdout).toBe(`${environ}rc=0\n`);
      // No core file of the agent (its memory holds the keys) that the sandbox could provoke and read: its core
      // limit is 0, hard too, and the sandbox cannot raise it.
      const core = await bash(
        s,
        "grep 'core file' /proc/$PPID/limits; prlimit --pid $PPID --core=unlimited; echo rc=$?",
      );
      expect(core.stdout).toMatch(/^Max core file size\s+0\s+0\s+bytes\s*\nrc=[1-9]/);
      // Nor any process of the sandbox (the key is in this command's own argv, not in an environment).
      const found = await bash(s, `grep -l -a -F '${s.key}' /proc/[0-9]*/environ 2>/dev/null; echo end`);
      expect(found.stdout).toBe("end\n");
      // The agent still has it: its routes need it.
      const refused = await fetch(new URL("/api/bash/execute_bash_command", s.handle.agentUrl), {
        method: "POST",
        headers: { "x-session-api-key": "wrong" },
        body: JSON.stringify({ command: "true" }),
      });
      expect(refused.status).toBe(401);
    }
  });

  it("F4: 1500 idle connections from bob's sandbox take no more than the cap of alice's agent; /alive answers", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    const port = alice.handle.port as number;
    // Alice's agent where bob's sandbox would reach it: her port on the shared loopback, else her address.
    const host = isolated() ? new URL(alice.handle.agentUrl).hostname : "127.0.0.1";
    if (isolated())
      expect(await probe(bob, host, port), "alice's agent from bob's sandbox").toMatch(UNREACHABLE);
    // Opens the connections as fast as it can and holds them 20 s (in the background of bob's sandbox).
    const flood = `for (let i = 0; i < 1500; i++) require("net").connect(${port}, "${host}").on("error", () => {}); setTimeout(() => process.exit(), 10000);`;
    expect((await bash(bob, `${node} -e '${flood}' >/dev/null 2>&1 & echo started`)).stdout).toBe(
      "started\n",
    );
    await new Promise((r) => setTimeout(r, 2000));
    const sockets = (pid: number) =>
      readdirSync(`/proc/${pid}/fd`).filter((fd) => {
        try {
          return readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith("socket:");
        } catch {
          return false;
        }
      }).length;
    const pid = agentPid(alice);
    for (let i = 0; i < 5; i++) {
      const alive = await fetch(new URL("/alive", alice.handle.agentUrl), {
        signal: AbortSignal.timeout(3000),
      });
      expect(alive.status, `probe ${i}`).toBe(200);
    }
    expect(sockets(pid)).toBeLessThanOrEqual(256 + 8);
    expect(await runtime.inspect(alice.handle)).toBe("running");
  }, 60_000);

  it("F2: the agent's output goes to its own workspace's disk: writing past its size fails there; the host keeps nothing", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    for (const s of [alice, bob]) {
      const pid = agentPid(s);
      const log = join(s.workspace, ".openhands", "logs", "sandbox.log");
      expect(readlinkSync(`/proc/${pid}/fd/1`)).toBe(log);
      expect(readlinkSync(`/proc/${pid}/fd/2`)).toBe(log);
      expect(statSync(log).uid).toBe(statSync(s.workspace).uid);
    }
    // The sandbox's own file: it may write to it, as far as its disk goes.
    const wrote = await bash(alice, "head -c 100M /dev/zero > /proc/$PPID/fd/1; echo $?");
    expect(wrote.stdout).not.toBe("0\n");
    expect(statSync(join(alice.workspace, ".openhands", "logs", "sandbox.log")).size).toBeLessThanOrEqual(
      DISK,
    );
    expect(readdirSync(join(root, "sandboxes"))).not.toContain(".logs");
    await bash(alice, "rm -f $HOME/.openhands/logs/sandbox.log");
    expect((await fetch(new URL("/alive", alice.handle.agentUrl))).status).toBe(200);
  }, 60_000);

  it("F10: a FIFO in place of a saved events.jsonl does not hold the restarted agent", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    const id = "c".repeat(32);
    const created = await fetch(new URL("/api/conversations", bob.handle.agentUrl), {
      method: "POST",
      headers: { "x-session-api-key": bob.key, "content-type": "application/json" },
      body: JSON.stringify({ conversation_id: id, agent: { kind: "Agent", llm: { model: "openai/x" } } }),
    });
    expect(created.status).toBe(200);
    const dir = "$HOME/.openhands/conversations";
    const planted = await bash(
      bob,
      `rm ${dir}/${id}/events.jsonl && mkfifo ${dir}/${id}/events.jsonl && echo ok`,
    );
    expect(planted.stdout).toBe("ok\n");
    process.kill(agentPid(bob), "SIGKILL");
    for (let i = 0; i < 200 && (await runtime.inspect(bob.handle)) !== "error"; i++)
      await new Promise((r) => setTimeout(r, 25));
    const handle = await restart(bob.handle, {
      sandboxId: "bob-sbx",
      spec: spec(),
      sessionApiKey: bob.key,
    });
    bob = { ...bob, handle };
    expect(await runtime.waitHealthy(handle, 10_000)).toBe(true);
    const listed = await fetch(new URL("/api/conversations?ids=x", handle.agentUrl), {
      headers: { "x-session-api-key": bob.key },
      signal: AbortSignal.timeout(5000),
    });
    expect(listed.status).toBe(200);
  }, 60_000);

  it("F3: a restart refuses a working directory the sandbox replaced with a symlink; the host folder keeps its owner", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    const victim = join(root, "host-folder");
    mkdirSync(join(victim, "inside"), { recursive: true });
    const carol = await start("carol-sbx", "project");
    const planted = await bash(carol, `cd $HOME && rm -rf project && ln -s ${victim} project && echo ok`);
    expect(planted.stdout).toBe("ok\n");
    process.kill(agentPid(carol), "SIGKILL");
    for (let i = 0; i < 200 && (await runtime.inspect(carol.handle)) !== "error"; i++)
      await new Promise((r) => setTimeout(r, 25));
    const outcome = await restart(carol.handle, {
      sandboxId: "carol-sbx",
      spec: spec("project"),
      sessionApiKey: carol.key,
    }).then(
      () => "started",
      (e: unknown) => String(e),
    );
    for (const p of [victim, join(victim, "inside")]) expect(statSync(p).uid, p).toBe(0);
    expect(outcome).toMatch(/symlink/);
    expect(readProcStat(agentPid(alice))).not.toBeNull();
    await runtime.remove(carol.handle);
    expect(statSync(victim).uid).toBe(0);
    expect(readdirSync(victim)).toEqual(["inside"]);
  }, 60_000);

  it("F5: a deleted sandbox's disk is detached for good, whoever holds a file of it (another sandbox) killed", async (ctx) => {
    if (skip !== null) return ctx.skip(skip);
    const dave = await start("dave-sbx");
    const name = `f5-${process.pid}-${Date.now()}`;
    // bob receives a descriptor over an abstract unix socket (its network namespace's: the host's, where sandboxes
    // share it) and writes through it; or over a socket file in its workspace (where the host's relay hands it).
    const holder = [
      "cat > $HOME/holder.py <<'PY'",
      "import os, select, socket, sys, time",
      "os.chdir(os.path.expanduser('~'))",
      "socks = []",
      'for addr in ["\\0" + sys.argv[1], "f5-in.sock"]:',
      "    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.bind(addr); s.listen(1); socks.append(s)",
      "ready, _, _ = select.select(socks, [], [])",
      "c, _ = ready[0].accept()",
      "_, fds, _, _ = socket.recv_fds(c, 16, 1)",
      "end = time.time() + 30",
      "while time.time() < end:",
      "    try: os.write(fds[0], b'x' * 65536)",
      "    except OSError: pass",
      "    time.sleep(0.05)",
      "PY",
      `/usr/bin/python3 $HOME/holder.py ${name} >/dev/null 2>&1 & echo started`,
    ].join("\n");
    expect((await bash(bob, holder)).stdout).toBe("started\n");
    await new Promise((r) => setTimeout(r, 300));
    // dave opens a file of its workspace and hands it over.
    if (isolated()) {
      // Its own namespace's abstract sockets only: bob's is out of reach.
      const tried = [
        "/usr/bin/python3 - <<'PY'",
        "import socket",
        "c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)",
        "try:",
        `    c.connect("\\0${name}"); print("connected")`,
        "except OSError as e:",
        "    print(type(e).__name__)",
        "PY",
      ].join("\n");
      expect((await bash(dave, tried)).stdout).toBe("ConnectionRefusedError\n");
      // So a host process relays it: dave offers it on a socket file of its workspace, the relay takes it there
      // and hands it to bob's socket file.
      const offer = [
        "cd $HOME && /usr/bin/python3 - >/dev/null 2>&1 <<'PY' &",
        "import os, socket",
        'fd = os.open(os.path.expanduser("~/held.bin"), os.O_WRONLY | os.O_CREAT, 0o600)',
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)",
        's.bind("f5-out.sock"); s.listen(1)',
        "c, _ = s.accept()",
        'socket.send_fds(c, [b"x"], [fd])',
        "c.recv(1)",
        "PY",
        "echo offered",
      ].join("\n");
      expect((await bash(dave, offer)).stdout).toBe("offered\n");
      const relay = [
        "import os, socket, sys, time",
        "def connect(path):",
        "    for _ in range(100):",
        "        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)",
        "        try:",
        "            c.connect(path); return c",
        "        except OSError:",
        "            c.close(); time.sleep(0.05)",
        "    raise SystemExit('no socket at ' + path)",
        "os.chdir(sys.argv[1])",
        "_, fds, _, _ = socket.recv_fds(connect('f5-out.sock'), 16, 1)",
        "os.chdir(sys.argv[2])",
        'socket.send_fds(connect("f5-in.sock"), [b"x"], fds)',
        'print("sent")',
      ].join("\n");
      const relayed = spawnSync("/usr/bin/python3", ["-c", relay, dave.workspace, bob.workspace], {
        encoding: "utf8",
        timeout: 20_000,
      });
      expect(relayed.stdout, relayed.stderr).toBe("sent\n");
    } else {
      const sender = [
        "/usr/bin/python3 - <<'PY'",
        "import os, socket",
        'fd = os.open(os.path.expanduser("~/held.bin"), os.O_WRONLY | os.O_CREAT, 0o600)',
        "c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)",
        `c.connect("\\0${name}")`,
        'socket.send_fds(c, [b"x"], [fd])',
        'print("sent")',
        "PY",
      ].join("\n");
      expect((await bash(dave, sender)).stdout).toBe("sent\n");
    }
    const held = join(dave.workspace, "held.bin");
    for (let i = 0; i < 100 && (statSync(held, { throwIfNoEntry: false })?.size ?? 0) === 0; i++)
      await new Promise((r) => setTimeout(r, 50));
    expect(statSync(held).size).toBeGreaterThan(0);
    const holders = () => listProcesses().filter((p) => cmdline(p.pid).includes(name));
    expect(holders()).toHaveLength(1);
    // The loop device under dave's workspace.
    const mount = readFileSync("/proc/self/mountinfo", "utf8")
      .split("\n")
      .find((line) => line.split(" ")[4] === dave.workspace);
    const device = /\s(\/dev\/loop\d+)\s/.exec(mount ?? "")?.[1];
    expect(device, mount).toBeDefined();
    const backing = `/sys/block/${basename(device ?? "")}/loop/backing_file`;
    expect(existsSync(backing)).toBe(true);
    await runtime.remove(dave.handle);
    // Before the removal answered: the holder is gone, the device detached, nothing of the disk left.
    expect(holders()).toEqual([]);
    expect(existsSync(backing), `${device} still attached`).toBe(false);
    expect(existsSync(dave.workspace)).toBe(false);
    expect((await fetch(new URL("/alive", bob.handle.agentUrl))).status).toBe(200);
  }, 60_000);
});

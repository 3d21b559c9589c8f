import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { getPriority, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it, vi } from "vitest";
import { BUILTIN_AGENT_COMMAND, BUILTIN_AGENT_MAIN } from "../../agent/shared/builtin-agent.ts";
import { listProcesses, readProcStat } from "../../agent/shared/proc-tree.ts";
import { createProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime.ts";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import type { RuntimeHandle, RuntimeSpec } from "../../src/ports/sandbox-runtime.ts";
import {
  type ContractSpecKind,
  describeRuntimeContract,
  type RuntimeContractHooks,
} from "./runtime-contract.ts";

const root = mkdtempSync(join(tmpdir(), "runtime-process-"));
const runtimes: ProcessRuntime[] = [];
const makeRuntime = (network?: "host"): ProcessRuntime => {
  const runtime = createProcessRuntime({
    workspaceRoot: root,
    stopGraceMs: 1000,
    ...(network ? { network } : {}),
  });
  runtimes.push(runtime);
  return runtime;
};

interface Data {
  pid: number;
  startTimeTicks: number;
  workspace: string;
}
const dataOf = (handle: RuntimeHandle): Data => handle.data as unknown as Data;
const alive = (handle: RuntimeHandle): boolean => {
  const stat = readProcStat(dataOf(handle).pid);
  return stat !== null && stat.startTime === dataOf(handle).startTimeTicks && stat.state !== "Z";
};

/** Runs a command through the agent's API with the sandbox's key. */
const execIn = async (handle: RuntimeHandle, key: string, command: string): Promise<{ stdout: string }> => {
  const res = await fetch(new URL("/api/bash/execute_bash_command", handle.agentUrl), {
    method: "POST",
    headers: { "x-session-api-key": key },
    body: JSON.stringify({ command }),
  });
  return (await res.json()) as { stdout: string };
};

const spec = (command: string[], initialEnv: Record<string, string> = {}): RuntimeSpec => ({
  id: "process-test",
  command,
  initialEnv,
  workingDir: "",
});

const contractSpec = (kind: ContractSpecKind): RuntimeSpec =>
  kind === "agent" ? spec([], { CONTRACT_FOO: "bar" }) : spec(["/bin/sh", "-c", "sleep 0.2; exit 1"]);
const contractHooks: RuntimeContractHooks = {
  async destroyBehindBack(handle) {
    const { pid, startTimeTicks } = dataOf(handle);
    process.kill(-pid, "SIGKILL");
    // Wait until it is reaped (this test process is its parent): gone from /proc, not just a zombie.
    for (let i = 0; i < 500 && readProcStat(pid)?.startTime === startTimeTicks; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
  },
  // The parent saw a death by signal (a crash); a restarted server sees the pid gone and the workspace still there:
  // it ended without being removed, an error a resume can start again (restart).
  afterDestroy: { sameInstance: "error", freshInstance: "error" },
  async leftovers(handle) {
    const out: string[] = [];
    if (alive(handle)) out.push(`process ${dataOf(handle).pid}`);
    if (existsSync(dataOf(handle).workspace)) out.push(`workspace ${dataOf(handle).workspace}`);
    return out;
  },
  workspacePath: (handle) => dataOf(handle).workspace,
  async cleanup() {
    for (const r of runtimes) await r.killAll();
  },
};

describeRuntimeContract("process", makeRuntime, contractSpec, contractHooks);

// The same contract with warm agents: starts of the built-in agent claim one (the warm-agents tests below check
// that they do).
const warmRoot = mkdtempSync(join(tmpdir(), "runtime-warm-"));
describeRuntimeContract(
  "process with warm agents",
  () => {
    const runtime = createProcessRuntime({ workspaceRoot: warmRoot, stopGraceMs: 1000, warmAgents: 2 });
    runtimes.push(runtime);
    return runtime;
  },
  contractSpec,
  contractHooks,
);

describe("process runtime specifics", () => {
  const runtime = makeRuntime();
  const key = "process-specifics-key";
  afterAll(async () => {
    for (const r of runtimes) await r.killAll();
    rmSync(root, { recursive: true, force: true });
  });

  const exec = (handle: RuntimeHandle, command: string) => execIn(handle, key, command);

  it("replaces {port} in the command, runs a relative working dir inside the workspace, writes a log", async () => {
    const handle = await runtime.start({
      sandboxId: "port-subst",
      spec: { ...spec([BUILTIN_AGENT_COMMAND, "--port", "{port}"]), workingDir: "project" },
      sessionApiKey: key,
    });
    expect(await runtime.waitHealthy(handle, 10_000)).toBe(true);
    expect(dataOf(handle).workspace).toBe(join(root, "port-subst"));
    expect((await exec(handle, "pwd")).stdout).toBe(`${join(root, "port-subst", "project")}\n`);
    // The output goes to the workspace's own disk (its size bounds it), in a file of the sandbox's user.
    const log = join(root, "port-subst", ".openhands", "logs", "sandbox.log");
    expect(readFileSync(log, "utf8")).toContain("sandbox agent listening");
    expect(statSync(log).uid).toBe(statSync(join(root, "port-subst")).uid);
    expect(existsSync(join(root, ".logs"))).toBe(false);
    await runtime.remove(handle);
    expect(existsSync(join(root, "port-subst"))).toBe(false);
  });

  it("pauses, resumes and removes the commands the agent runs, background jobs included", async () => {
    const handle = await runtime.start({ sandboxId: "bg-jobs", spec: spec([]), sessionApiKey: key });
    expect(await runtime.waitHealthy(handle, 10_000)).toBe(true);
    await exec(handle, "sleep 300 > /dev/null 2>&1 &");
    // The shell exited, so the job was re-parented: find it by the sandbox's process group.
    const { pid } = dataOf(handle);
    const jobs = listProcesses()
      .filter((p) => p.pgrp === pid && p.pid !== pid)
      .map((p) => p.pid);
    expect(jobs.length).toBeGreaterThan(0);
    // Signals are delivered asynchronously: on a loaded machine a state can lag the kill() call briefly.
    const settled = (check: () => void) => vi.waitFor(check, { timeout: 2000, interval: 10 });
    await runtime.pause(handle);
    await settled(() => {
      for (const pid of jobs) expect(readProcStat(pid)?.state).toBe("T");
    });
    await runtime.resume(handle);
    await settled(() => {
      for (const pid of jobs) expect(readProcStat(pid)?.state).not.toBe("T");
    });
    await runtime.remove(handle);
    await settled(() => {
      for (const pid of jobs) expect(["Z", undefined]).toContain(readProcStat(pid)?.state);
    });
  });

  it("runs a sandbox and what it starts at the niceness asked (SANDBOX_NICE), below the service's", async () => {
    const own = getPriority();
    const niced = createProcessRuntime({
      workspaceRoot: root,
      stopGraceMs: 1000,
      limits: { nice: Math.min(19, own + 7) },
    });
    runtimes.push(niced);
    expect(niced.limits.priority).toBe(`nice ${Math.min(19, own + 7)}, below the service's`);
    const handle = await niced.start({ sandboxId: "niced", spec: spec([]), sessionApiKey: key });
    try {
      expect(await niced.waitHealthy(handle, 10_000)).toBe(true);
      await exec(handle, "sleep 300 > /dev/null 2>&1 &");
      const { pid } = dataOf(handle);
      const group = listProcesses().filter((p) => p.pgrp === pid);
      expect(group.length).toBeGreaterThan(1);
      // The sandbox's first process, the agent in it and the job it ran, not the service.
      for (const p of group) expect(getPriority(p.pid)).toBe(Math.min(19, own + 7));
      expect(getPriority()).toBe(own);
    } finally {
      await niced.remove(handle);
    }
    // Without it, a sandbox runs at the service's own niceness.
    const plain = await runtime.start({ sandboxId: "not-niced", spec: spec([]), sessionApiKey: key });
    try {
      expect(runtime.limits.priority).toBe("the service's (SANDBOX_NICE=0)");
      expect(getPriority(dataOf(plain).pid)).toBe(own);
    } finally {
      await runtime.remove(plain);
    }
  });

  it("removeBySandboxId finds the sandbox by its workspace and kills its background jobs, not other sandboxes", async () => {
    const handle = await runtime.start({ sandboxId: "by-id", spec: spec([]), sessionApiKey: key });
    const other = await runtime.start({ sandboxId: "by-id-other", spec: spec([]), sessionApiKey: key });
    expect(await runtime.waitHealthy(handle, 10_000)).toBe(true);
    expect(await runtime.waitHealthy(other, 10_000)).toBe(true);
    // A job that leaves the sandbox's process group: found by its working directory, not by the group.
    await exec(handle, "setsid sleep 300 > /dev/null 2>&1 < /dev/null &");
    let jobs: number[] = [];
    await vi.waitFor(
      () => {
        jobs = listProcesses()
          .filter((p) => p.pgrp !== dataOf(handle).pid && readProcStat(p.pid) !== null)
          .filter((p) => {
            try {
              return (
                readlinkSync(`/proc/${p.pid}/cwd`) === dataOf(handle).workspace &&
                p.pid !== dataOf(handle).pid
              );
            } catch {
              return false;
            }
          })
          .map((p) => p.pid);
        expect(jobs.length).toBeGreaterThan(0);
      },
      { timeout: 2000, interval: 20 },
    );
    const fresh = makeRuntime();
    expect(await fresh.removeBySandboxId("by-id")).toBeGreaterThanOrEqual(2);
    await vi.waitFor(
      () => {
        expect(alive(handle)).toBe(false);
        for (const pid of jobs) expect(["Z", undefined]).toContain(readProcStat(pid)?.state);
      },
      { timeout: 2000, interval: 10 },
    );
    expect(existsSync(dataOf(handle).workspace)).toBe(false);
    expect(await runtime.inspect(other)).toBe("running");
    await runtime.remove(other);
  });

  it("kills what a crashed sandbox left running in its group", async () => {
    const handle = await runtime.start({
      sandboxId: "leftovers",
      spec: spec(["/bin/sh", "-c", "sleep 300 & sleep 0.2; exit 2"]),
      sessionApiKey: key,
    });
    const { pid } = dataOf(handle);
    let jobs: number[] = [];
    for (let i = 0; i < 100 && jobs.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 5));
      jobs = listProcesses()
        .filter((p) => p.pgrp === pid && p.pid !== pid)
        .map((p) => p.pid);
    }
    expect(jobs.length).toBeGreaterThan(0);
    expect(await runtime.waitHealthy(handle, 5000)).toBe(false);
    expect(await runtime.inspect(handle)).toBe("error");
    await new Promise((r) => setTimeout(r, 50));
    for (const job of jobs) expect(["Z", undefined]).toContain(readProcStat(job)?.state);
    await runtime.remove(handle);
  });

  it("does not touch a process whose pid was reused (start time differs)", async () => {
    const handle = await runtime.start({ sandboxId: "pid-reuse", spec: spec([]), sessionApiKey: key });
    expect(await runtime.waitHealthy(handle, 10_000)).toBe(true);
    const impostor: RuntimeHandle = {
      ...handle,
      data: { ...handle.data, startTimeTicks: dataOf(handle).startTimeTicks + 1 },
    };
    const restarted = makeRuntime();
    // The process the handle names is gone (its pid is another's now); its workspace is there: ended, an error.
    expect(await restarted.inspect(impostor)).toBe("error");
    await expect(restarted.pause(impostor)).rejects.toThrow(/not running/);
    expect(await runtime.inspect(handle)).toBe("running");
    await runtime.remove(handle);
  });

  it("rejects a command that cannot be spawned and leaves no workspace", async () => {
    await expect(
      runtime.start({ sandboxId: "no-such-cmd", spec: spec(["/nonexistent/binary"]), sessionApiKey: key }),
    ).rejects.toThrow(/ENOENT/);
    expect(existsSync(join(root, "no-such-cmd"))).toBe(false);
  });

  it("rejects sandbox ids that are not plain folder names", async () => {
    for (const sandboxId of ["../escape", ".hidden", "a/b", ""]) {
      await expect(runtime.start({ sandboxId, spec: spec([]), sessionApiKey: key })).rejects.toThrow(
        /invalid/,
      );
    }
  });

  it("a sandbox that exits with status 0 is missing (gone, not crashed)", async () => {
    const handle = await runtime.start({
      sandboxId: "clean-exit",
      spec: spec(["/bin/sh", "-c", "exit 0"]),
      sessionApiKey: key,
    });
    expect(await runtime.waitHealthy(handle, 5000)).toBe(false);
    expect(await runtime.inspect(handle)).toBe("missing");
    await runtime.remove(handle);
  });

  it("judges a dead process nobody reaped (a zombie) by its exit status, or as removed once its workspace is gone", async () => {
    // `exec sleep` replaces the parent shell with a process that never waits: its children stay zombies.
    const parent = spawn("/bin/sh", ["-c", "sh -c 'exit 3' & sh -c 'exit 0' & exec sleep 30"], {
      stdio: "ignore",
    });
    try {
      let zombies: ReturnType<typeof listProcesses> = [];
      for (let i = 0; i < 200 && zombies.length < 2; i++) {
        await new Promise((r) => setTimeout(r, 10));
        zombies = listProcesses().filter((p) => p.ppid === parent.pid && p.state === "Z");
      }
      expect(zombies).toHaveLength(2);
      const handleOf = (z: (typeof zombies)[number]): RuntimeHandle => ({
        data: {
          pid: z.pid,
          pgid: z.pgrp,
          port: 9,
          workspace: join(root, "zombie"),
          startTimeTicks: z.startTime,
        },
        agentUrl: "http://127.0.0.1:9",
        port: 9,
      });
      mkdirSync(join(root, "zombie"), { recursive: true });
      const states = await Promise.all(zombies.map((z) => makeRuntime().inspect(handleOf(z))));
      expect(states.sort()).toEqual(["error", "missing"]);
      // Its workspace gone, the sandbox was removed: the one that failed is missing too, not an error.
      rmSync(join(root, "zombie"), { recursive: true, force: true });
      const removed = await Promise.all(zombies.map((z) => makeRuntime().inspect(handleOf(z))));
      expect(removed).toEqual(["missing", "missing"]);
      expect(zombies.map((z) => z.exitStatus).sort()).toEqual([0, 3 << 8]);
    } finally {
      parent.kill("SIGKILL");
    }
  });

  it("hands the built-in agent its socket already listening: a probe sent at once waits instead of being refused", async () => {
    // On the host's network: in a network of its own the agent binds inside it (a warm one before its claim).
    const hostNetwork = makeRuntime("host");
    const handle = await hostNetwork.start({
      sandboxId: "handed-socket",
      spec: spec([BUILTIN_AGENT_COMMAND]),
      sessionApiKey: key,
    });
    // No health wait first: the connection is queued in the socket's backlog until the agent accepts it.
    const res = await fetch(`${handle.agentUrl}/alive`, { signal: AbortSignal.timeout(30_000) });
    expect(res.status).toBe(200);
    // The server's own copy is closed: only the sandbox holds the port, and it is gone with it.
    await hostNetwork.remove(handle);
    await expect(fetch(`${handle.agentUrl}/alive`)).rejects.toThrow();
  });

  it("reports a live process that does not answer /alive as starting", async () => {
    const handle = await runtime.start({
      sandboxId: "silent",
      spec: spec(["/bin/sh", "-c", "sleep 30"]),
      sessionApiKey: key,
    });
    expect(await runtime.waitHealthy(handle, 100)).toBe(false);
    expect(await runtime.inspect(handle)).toBe("starting");
    // Without a probe it is only known to be alive.
    expect(await runtime.inspect(handle, { probe: false })).toBe("running");
    await runtime.pause(handle);
    expect(await runtime.inspect(handle, { probe: false })).toBe("paused");
    await runtime.resume(handle);
    await runtime.remove(handle);
    expect(alive(handle)).toBe(false);
  });

  it("kills a sandbox that ignores SIGTERM after the grace period", async () => {
    const handle = await runtime.start({
      sandboxId: "stubborn",
      spec: spec(["/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"]),
      sessionApiKey: key,
    });
    await new Promise((r) => setTimeout(r, 100));
    const t0 = Date.now();
    await runtime.remove(handle);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(900);
    expect(alive(handle)).toBe(false);
    expect(await runtime.inspect(handle)).toBe("missing");
  });
});

describe("warm agents", () => {
  const base = mkdtempSync(join(tmpdir(), "runtime-warm-agents-"));
  const made: ProcessRuntime[] = [];
  const make = (dir: string, warmAgents: number): ProcessRuntime => {
    const r = createProcessRuntime({
      workspaceRoot: join(base, dir),
      stopGraceMs: 500,
      warmAgents,
      uidLockDir: claims,
    });
    made.push(r);
    return r;
  };
  const until = async (what: string, done: () => boolean, timeoutMs = 10_000): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    while (!done()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  const key = "warm-agent-key-0123456789";
  const exec = (handle: RuntimeHandle, command: string) => execIn(handle, key, command);
  /** Pids of the processes that carry a warm agent's folder name in their command line or environment. */
  const processesOf = (folder: string): number[] =>
    listProcesses()
      .map((p) => p.pid)
      .filter((pid) => {
        try {
          return (
            readFileSync(`/proc/${pid}/cmdline`, "latin1").includes(folder) ||
            readFileSync(`/proc/${pid}/environ`, "latin1").includes(folder)
          );
        } catch {
          return false;
        }
      });
  /**
   * Another server: a Node process with a runtime on `root` keeping `warmAgents` agents warm, once all are started.
   * Ending its stdin removes everything it started and ends it; killing it is a server that dies.
   */
  /** The host-wide uid claims of these tests' servers (their own folder, not the host's). */
  const claims = join(base, "uid-claims");
  const warmServer = async (root: string, warmAgents: number): Promise<ChildProcess> => {
    const script = [
      `import { createProcessRuntime } from ${JSON.stringify(join(process.cwd(), "src/adapters/runtimes/process/process-runtime.ts"))};`,
      `const r = createProcessRuntime({ workspaceRoot: ${JSON.stringify(root)}, warmAgents: ${warmAgents}, uidLockDir: ${JSON.stringify(claims)} });`,
      `const t = setInterval(() => { if (r.warmReady() === ${warmAgents}) { clearInterval(t); console.log('ready'); } }, 10);`,
      "process.stdin.resume(); process.stdin.on('end', async () => { await r.killAll(); process.exit(0); });",
    ].join("\n");
    const server = spawn(process.execPath, ["--input-type=module", "-e", script], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    await new Promise<void>((ok, fail) => {
      server.stdout.on("data", (d: Buffer) => d.toString().includes("ready") && ok());
      server.once("exit", (code) => fail(new Error(`server exited ${code}`)));
    });
    return server;
  };
  afterAll(async () => {
    for (const r of made) await r.killAll();
    rmSync(base, { recursive: true, force: true });
  });

  it("a start of the built-in agent claims a warm one: its own folder, the spec's environment and working dir, no key for commands; the pool refills", async () => {
    const runtime = make("claim", 2);
    await until("two warm agents", () => runtime.warmReady() === 2);
    const handle = await runtime.start({
      sandboxId: "claimed-one",
      spec: { ...spec([], { WARM_FOO: "bar" }), workingDir: "project" },
      sessionApiKey: key,
    });
    expect(runtime.warmReady()).toBe(1);
    expect(await runtime.waitHealthy(handle, 10_000)).toBe(true);
    const data = handle.data as unknown as Data & { sandboxId?: string };
    expect(data.workspace).toMatch(/\/ws-[A-Za-z0-9]{20}$/);
    const out = await exec(
      handle,
      'pwd; echo "$WARM_FOO $HOME"; env | grep -c -e SESSION -e SANDBOX_AGENT || true',
    );
    expect(out.stdout).toBe(`${join(data.workspace, "project")}\nbar ${data.workspace}\n0\n`);
    // The wrong key is refused: the claim's key is the one in force.
    const refused = await fetch(new URL("/api/bash/execute_bash_command", handle.agentUrl), {
      method: "POST",
      headers: { "x-session-api-key": "not-the-key" },
      body: JSON.stringify({ command: "true" }),
    });
    expect(refused.status).toBe(401);
    await until("the pool refilled", () => runtime.warmReady() === 2);
    // A fresh instance (a restarted server) removes it by sandbox id alone, through the claim record.
    const fresh = make("claim", 0);
    expect(await fresh.removeBySandboxId("claimed-one")).toBeGreaterThan(0);
    expect(existsSync(data.workspace)).toBe(false);
    expect(existsSync(join(base, "claim", ".claimed", "claimed-one"))).toBe(false);
  });

  it("a spec that sets a Node startup variable or passes agent arguments starts cold", async () => {
    const runtime = make("cold", 2);
    await until("two warm agents", () => runtime.warmReady() === 2);
    for (const [id, s] of [
      ["node-options", spec([], { NODE_OPTIONS: "--no-warnings" })],
      ["agent-args", spec([BUILTIN_AGENT_COMMAND, "--port", "{port}"])],
    ] as const) {
      const handle = await runtime.start({ sandboxId: id, spec: s, sessionApiKey: key });
      expect(dataOf(handle).workspace).toBe(join(base, "cold", id));
      expect((handle.data as { sandboxId?: string }).sandboxId).toBeUndefined();
      expect(await runtime.waitHealthy(handle, 10_000)).toBe(true);
      await runtime.remove(handle);
    }
    expect(runtime.warmReady()).toBe(2);
  });

  it("close stops the warm agents and removes their folders; no new ones start", async () => {
    const runtime = make("close", 2);
    await until("two warm agents", () => runtime.warmReady() === 2);
    const folders = readdirSync(join(base, "close", ".warm"));
    expect(folders).toHaveLength(2);
    await runtime.close();
    for (const folder of folders) {
      expect(existsSync(join(base, "close", folder))).toBe(false);
      expect(processesOf(folder)).toEqual([]);
    }
    await new Promise((r) => setTimeout(r, 300));
    expect(runtime.warmReady()).toBe(0);
    expect(readdirSync(join(base, "close", ".warm"))).toEqual([]);
  });

  it("the warm agents of a server that dies exit with it; the next server on the root removes their folders", async () => {
    const root = join(base, "died");
    const server = await warmServer(root, 2);
    const folders = readdirSync(join(root, ".warm"));
    expect(folders).toHaveLength(2);
    await until("the warm agents running", () => folders.every((f) => processesOf(f).length > 0));
    server.kill("SIGKILL");
    await until("the warm agents gone", () => folders.every((f) => processesOf(f).length === 0));
    for (const folder of folders) expect(existsSync(join(root, folder))).toBe(true);
    const next = make("died", 0);
    // Each removal scans the host's processes and detaches the workspace's loop device: seconds on a loaded machine.
    await until("the folders removed", () => folders.every((f) => !existsSync(join(root, f))), 40_000);
    // A record goes once its folder's removal has finished (its loop disk detached, its network deleted).
    await until("the records removed", () => readdirSync(join(root, ".warm")).length === 0, 20_000);
    expect(next.warmReady()).toBe(0);
  }, 90_000);

  it("a running server reaps warm agents whose server is gone, periodically; another live server's agents stay", async () => {
    const root = join(base, "reap");
    // Another server on the same root, alive, with one warm agent.
    const other = await warmServer(root, 1);
    const [otherFolder] = readdirSync(join(root, ".warm"));
    expect(otherFolder).toBeDefined();
    // This server runs before the leftover appears (its sweep at creation finds nothing): only its periodic sweep
    // can find it.
    const server = createProcessRuntime({ workspaceRoot: root, warmAgents: 0, leftoverSweepMs: 100 });
    made.push(server);
    await new Promise((r) => setTimeout(r, 200));
    // What a killed server left: a warm agent still running (here a stand-in process in its folder) whose
    // record names an owner that is gone (a pid and start time no process has).
    const leftover = "ws-LeftOverAgentXXXXXX";
    mkdirSync(join(root, leftover));
    const agent = spawn("sleep", ["60"], {
      cwd: join(root, leftover),
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: join(root, leftover) },
      stdio: "ignore",
      detached: true,
    });
    agent.unref();
    const gone = spawnSync("true");
    writeFileSync(join(root, ".warm", leftover), `${gone.pid}:1`);
    await until("the stand-in agent running", () => processesOf(leftover).length > 0);
    await until(
      "the leftover reaped",
      () => processesOf(leftover).length === 0 && !existsSync(join(root, leftover)),
    );
    expect(existsSync(join(root, ".warm", leftover))).toBe(false);
    // The live server's agent is untouched.
    await new Promise((r) => setTimeout(r, 300));
    expect(processesOf(otherFolder ?? "")).not.toEqual([]);
    expect(existsSync(join(root, otherFolder ?? ""))).toBe(true);
    other.stdin?.end();
    await new Promise((r) => other.once("exit", r));
  });

  const isolatedAsRoot = process.getuid?.() === 0 && spawnSync("bwrap", ["--version"]).error === undefined;
  it.skipIf(!isolatedAsRoot)(
    "as root, servers on one host never hand out one uid twice (host-wide claims), one DATA_DIR or several; removal gives a uid back",
    async () => {
      const root = join(base, "uids");
      // Three servers start together, as WORKERS or replicas on one DATA_DIR do, each filling its warm pool, and
      // two more on DATA_DIRs of their own.
      const others = [join(base, "uids-other-a"), join(base, "uids-other-b")];
      const servers = await Promise.all([root, root, root, ...others].map((r) => warmServer(r, 4)));
      const workspaces = [root, ...others].flatMap((r) =>
        readdirSync(r)
          .filter((name) => name.startsWith("ws-"))
          .map((name) => join(r, name)),
      );
      expect(workspaces).toHaveLength(20);
      const uids = workspaces.map((w) => statSync(w).uid);
      expect(new Set(uids).size).toBe(20);
      workspaces.forEach((w, i) => {
        expect(readFileSync(join(claims, String(uids[i])), "utf8")).toBe(w);
      });
      await Promise.all(
        servers.map((server) => {
          const exited = new Promise((ok) => server.once("exit", ok));
          server.stdin?.end();
          return exited;
        }),
      );
      // Every claim of these servers given back (other tests' runtimes share the claims folder).
      const ours = readdirSync(claims).filter((name) =>
        [root, ...others].some((r) => readFileSync(join(claims, name), "utf8").startsWith(`${r}/`)),
      );
      expect(ours).toEqual([]);
      // A crash's leftover claim (its workspace gone, older than a minute) is taken over.
      const taken = new Set(readdirSync(claims).map(Number));
      const lowest = Math.min(...uids.filter((u) => !taken.has(u)));
      writeFileSync(join(claims, String(lowest)), join(base, "gone", "ws-x"));
      const old = new Date(Date.now() - 120_000);
      utimesSync(join(claims, String(lowest)), old, old);
      // The lowest free uid again: given back by the removal.
      const runtime = make("uids", 0);
      const first = await runtime.start({ sandboxId: "uid-again", spec: spec([]), sessionApiKey: key });
      const uid = (first.data as { uid?: number }).uid;
      expect(uid).toBe(lowest);
      await runtime.remove(first);
      expect(existsSync(join(claims, String(uid)))).toBe(false);
    },
  );

  it("the agent waits for its claim: exits 0 when stdin ends without one, 2 on a malformed one", async () => {
    const run = (input: string) =>
      spawnSync(process.execPath, [BUILTIN_AGENT_MAIN], {
        input,
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", SANDBOX_AGENT_CLAIM: "stdin", PORT: "0" },
        encoding: "utf8",
        timeout: 10_000,
      });
    expect(run("").status).toBe(0);
    const bad = run("{not json");
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("not JSON");
    expect(run(JSON.stringify({ env: { A: 1 }, cwd: "/" })).status).toBe(2);
    // A claim without a key is refused like an agent started without one.
    const noKey = run(JSON.stringify({ env: { PATH: "/usr/bin:/bin" }, cwd: "/" }));
    expect(noKey.status).toBe(2);
    expect(noKey.stderr).toContain("SESSION_API_KEY");
  });
});

describe("process runtime isolation choice", () => {
  const base = mkdtempSync(join(tmpdir(), "runtime-isolation-"));
  const made: ProcessRuntime[] = [];
  const make = (options: Omit<Parameters<typeof createProcessRuntime>[0], "workspaceRoot">, name: string) => {
    const r = createProcessRuntime({ workspaceRoot: join(base, name), stopGraceMs: 500, ...options });
    made.push(r);
    return r;
  };
  const bwrapFound = spawnSync("bwrap", ["--version"]).error === undefined;
  afterAll(async () => {
    for (const r of made) await r.killAll();
    rmSync(base, { recursive: true, force: true });
  });

  it("isolates with bubblewrap by default where it runs", () => {
    const r = make({}, "default");
    if (!bwrapFound)
      console.log("bubblewrap not installed: the default runtime runs unisolated for one user");
    expect(r.isolation).toEqual(
      bwrapFound
        ? { mode: "bwrap", singleUser: false }
        : expect.objectContaining({ mode: "none", singleUser: true }),
    );
  });

  it("SANDBOX_ISOLATION=bwrap: creating the runtime fails when bwrap cannot run", () => {
    expect(() => make({ isolation: "bwrap", bwrapPath: "/nonexistent/bwrap" }, "required")).toThrow(
      /SANDBOX_ISOLATION=bwrap, but bubblewrap cannot run sandboxes here: \/nonexistent\/bwrap not found/,
    );
  });

  it("auto without bwrap: one user only, remembered across instances; none: every user", async () => {
    const r = make({ bwrapPath: "/nonexistent/bwrap" }, "fallback");
    expect(r.isolation).toMatchObject({ mode: "none", singleUser: true });
    r.admit?.("alice");
    expect(() => r.admit?.("bob")).toThrow(/SANDBOX_ISOLATION=none/);
    const request = (ownerId: string) => ({
      sandboxId: `sb-${ownerId}`,
      spec: spec(["/bin/sh", "-c", "sleep 5"]),
      sessionApiKey: "k".repeat(16),
      ownerId,
    });
    await expect(r.start(request("bob"))).rejects.toThrow(/one user only/);
    const handle = await r.start(request("alice"));
    await r.remove(handle);
    const restarted = make({ bwrapPath: "/nonexistent/bwrap" }, "fallback");
    expect(() => restarted.admit?.("bob")).toThrow(/one user only/);
    const open = make({ isolation: "none", bwrapPath: "/nonexistent/bwrap" }, "fallback");
    expect(open.isolation).toEqual({ mode: "none", singleUser: false });
    open.admit?.("bob");
    await open.remove(await open.start(request("bob")));
  });

  it.skipIf(!bwrapFound)(
    "runs bwrap and setpriv from the server's search path, never from a spec's PATH",
    async () => {
      const r = make({}, "path");
      const fake = join(base, "fake-bin");
      mkdirSync(fake, { recursive: true });
      const marker = join(base, "fake-ran");
      for (const name of ["bwrap", "setpriv"]) {
        writeFileSync(join(fake, name), `#!/bin/sh\ntouch ${marker}\nexec sleep 5\n`, { mode: 0o755 });
      }
      const handle = await r.start({
        sandboxId: "spec-path",
        spec: spec([], { PATH: `${fake}:/usr/bin:/bin` }),
        sessionApiKey: "k".repeat(16),
      });
      expect(await r.waitHealthy(handle, 10_000)).toBe(true);
      expect(existsSync(marker)).toBe(false);
      await r.remove(handle);
    },
  );
});

describe("process sandbox limits", () => {
  const base = mkdtempSync(join(tmpdir(), "runtime-limits-"));
  const made: ProcessRuntime[] = [];
  const MB = 1024 * 1024;
  const limits = { pids: 48, memoryBytes: 192 * MB, cpus: 0.5, tmpBytes: 8 * MB, shmBytes: 4 * MB };
  const make = (
    dir: string,
    extra: Partial<Parameters<typeof createProcessRuntime>[0]> = {},
  ): ProcessRuntime => {
    const r = createProcessRuntime({ workspaceRoot: join(base, dir), stopGraceMs: 500, limits, ...extra });
    made.push(r);
    return r;
  };
  const key = "limits-key-0123456789";
  const exec = (handle: RuntimeHandle, command: string) => execIn(handle, key, command);
  const cgroupOf = (pid: number): string => readFileSync(`/proc/${pid}/cgroup`, "utf8");
  afterAll(async () => {
    for (const r of made) await r.killAll();
    rmSync(base, { recursive: true, force: true });
  });
  const runtime = make("cg");
  const isolated = runtime.isolation.mode === "bwrap";
  const cgroups = /^cgroup v[12]$/.test(runtime.limits.pids);
  if (!cgroups) console.log(`cgroup limit tests skipped: ${runtime.limits.pids}`);

  it.skipIf(!cgroups || !isolated)(
    "every sandbox runs in a cgroup of its own with the pid, memory and CPU limits; /tmp and /dev/shm have their sizes; no nested user namespaces",
    async () => {
      expect(runtime.limits).toMatchObject({ memory: runtime.limits.pids, cpu: runtime.limits.pids });
      const handle = await runtime.start({ sandboxId: "limited", spec: spec([]), sessionApiKey: key });
      expect(await runtime.waitHealthy(handle, 10_000)).toBe(true);
      expect(cgroupOf(dataOf(handle).pid)).toMatch(/pids:\/agent-workspace-[0-9a-f]{12}\/limited$/m);
      // A fork bomb's worth of sleeps: at most the limit run (the agent's and this Node's threads count too).
      const bombScript =
        "const {spawn}=require('child_process');const kids=[];for(let i=0;i<200;i++){const c=spawn('sleep',['30']);c.on('error',()=>{});if(c.pid)kids.push(c)}setTimeout(()=>{for(const c of kids)c.kill();console.log('started='+kids.length)},200)";
      const bomb = await exec(handle, `${process.execPath} -e "${bombScript}"`);
      const started = Number(/started=(\d+)/.exec(bomb.stdout)?.[1] ?? -1);
      expect(started).toBeGreaterThan(5);
      expect(started).toBeLessThan(limits.pids);
      // 400 MB touched: the kernel kills the command, the agent lives on.
      const hog = await exec(
        handle,
        `${process.execPath} -e "const a=[];for(let i=0;i<40;i++)a.push(Buffer.alloc(10*1024*1024,1));console.log('kept')"; echo "exit=$?"`,
      );
      expect(hog.stdout).not.toContain("kept");
      expect(hog.stdout).toContain("exit=137");
      expect(await runtime.inspect(handle)).toBe("running");
      const tmp = await exec(
        handle,
        "head -c 16000000 /dev/zero > /tmp/big; echo tmp=$?; head -c 8000000 /dev/zero > /dev/shm/big; echo shm=$?; df -k /tmp /dev/shm | tail -2",
      );
      expect(tmp.stdout).toContain("tmp=1");
      expect(tmp.stdout).toContain("shm=1");
      const userns = await exec(handle, "unshare -U -r id; echo rc=$?");
      expect(userns.stdout).not.toContain("uid=0");
      expect(userns.stdout).toContain("rc=1");
      const folder = dataOf(handle).workspace.split("/").pop() ?? "";
      const cgroupDir = join(
        "/sys/fs/cgroup/pids",
        cgroupOf(dataOf(handle).pid).match(/pids:(\/\S+)/)?.[1] ?? "",
      );
      expect(existsSync(cgroupDir) || !cgroupDir.endsWith(folder)).toBe(true);
      await runtime.remove(handle);
      await vi.waitFor(() => expect(existsSync(cgroupDir)).toBe(false), { timeout: 3000 });
    },
    60_000,
  );

  it.skipIf(!cgroups)(
    "a sandbox killed by its memory limit is an error, and the runtime says why",
    async () => {
      const handle = await runtime.start({
        sandboxId: "oom",
        spec: spec([process.execPath, "-e", "const a=[];for(;;)a.push(Buffer.alloc(10*1024*1024,1))"]),
        sessionApiKey: key,
      });
      await vi.waitFor(async () => expect(await runtime.inspect(handle)).toBe("error"), { timeout: 10_000 });
      expect(runtime.failureReason(handle)).toMatch(/memory limit/);
      await runtime.remove(handle);
    },
  );

  it.skipIf(!cgroups)(
    "a new runtime on the root removes the cgroups of workspaces that are gone",
    async () => {
      const cgroupBase = (): string => {
        const line = cgroupOf(process.pid).match(/^\d+:pids:/m) ? "/sys/fs/cgroup/pids" : "/sys/fs/cgroup";
        const hash = createHash("sha256").update(join(base, "cg")).digest("hex").slice(0, 12);
        return join(line, `agent-workspace-${hash}`);
      };
      const stale = join(cgroupBase(), "gone-sandbox");
      mkdirSync(stale);
      make("cg");
      expect(existsSync(stale)).toBe(false);
    },
  );

  it.skipIf(!cgroups)("a claimed warm agent runs in its own limited cgroup", async () => {
    const warm = make("warm", { warmAgents: 1 });
    await vi.waitFor(() => expect(warm.warmReady()).toBe(1), { timeout: 10_000 });
    const handle = await warm.start({ sandboxId: "claimed", spec: spec([]), sessionApiKey: key });
    expect(await warm.waitHealthy(handle, 10_000)).toBe(true);
    const folder = dataOf(handle).workspace.split("/").pop() ?? "";
    expect(folder).toMatch(/^ws-/);
    expect(cgroupOf(dataOf(handle).pid)).toContain(`/${folder}\n`);
    // Inside, the sandbox has a cgroup namespace of its own: it sees its cgroup as the root.
    expect((await exec(handle, "cat /proc/self/cgroup")).stdout).toMatch(/^\d+:pids:\/$/m);
    await warm.remove(handle);
  });

  it.skipIf(!isolated || process.getuid?.() !== 0)(
    "without cgroups: rlimits, RLIMIT_NPROC for the sandbox's own uid and RLIMIT_AS per process",
    async () => {
      // RLIMIT_AS bounds address space, which Node reserves generously: the agent needs about 1.5 GiB of it.
      const r = make("rl", { cgroups: "off", limits: { ...limits, memoryBytes: 2048 * MB } });
      expect(r.limits.pids).toMatch(/RLIMIT_NPROC/);
      expect(r.limits.memory).toMatch(/RLIMIT_AS/);
      const handle = await r.start({ sandboxId: "rlimited", spec: spec([]), sessionApiKey: key });
      expect(await r.waitHealthy(handle, 10_000)).toBe(true);
      const out = await exec(
        handle,
        "prlimit --nproc --as --output SOFT --noheadings; unshare -U -r id; echo rc=$?",
      );
      expect(out.stdout).toContain(String(limits.pids));
      expect(out.stdout).toContain(String(2048 * MB));
      expect(out.stdout).toContain("rc=1");
      await r.remove(handle);
    },
  );
});

describe("process sandbox workspace sizes", () => {
  const base = mkdtempSync(join(tmpdir(), "runtime-disk-"));
  const made: ProcessRuntime[] = [];
  const MB = 1024 * 1024;
  const make = (dir: string, extra: Partial<Parameters<typeof createProcessRuntime>[0]>): ProcessRuntime => {
    const r = createProcessRuntime({ workspaceRoot: join(base, dir), stopGraceMs: 500, ...extra });
    made.push(r);
    return r;
  };
  const key = "disk-key-0123456789";
  afterAll(async () => {
    for (const r of made) await r.killAll();
    rmSync(base, { recursive: true, force: true });
  });
  const loop = make("loop", { diskBytes: 32 * MB });
  const loopHere = loop.limits.disk.startsWith("loop-mounted");
  if (!loopHere) console.log(`loop-mounted workspace test skipped: ${loop.limits.disk}`);

  it.skipIf(!loopHere)(
    "as root with loop devices: each workspace is a file system of its size; writing past it fails there only; removal unmounts it",
    async () => {
      const handle = await loop.start({ sandboxId: "sized", spec: spec([]), sessionApiKey: key });
      expect(await loop.waitHealthy(handle, 10_000)).toBe(true);
      const out = await execIn(
        handle,
        key,
        "head -c 48000000 /dev/zero > big; echo rc=$?; ls; df -k . | tail -1 | awk '{print $2}'",
      );
      expect(out.stdout).toContain("rc=1");
      expect(out.stdout).not.toContain("lost+found");
      const sizeKb = Number(out.stdout.trim().split("\n").at(-1));
      expect(sizeKb).toBeGreaterThan(20 * 1024);
      expect(sizeKb).toBeLessThanOrEqual(32 * 1024);
      expect(await loop.inspect(handle)).toBe("running");
      const workspace = dataOf(handle).workspace;
      expect(readFileSync("/proc/self/mountinfo", "utf8")).toContain(` ${workspace} `);
      await loop.remove(handle);
      expect(readFileSync("/proc/self/mountinfo", "utf8")).not.toContain(` ${workspace} `);
      expect(existsSync(workspace)).toBe(false);
      expect(readdirSync(join(base, "loop", ".disks"))).toEqual([]);
    },
    30_000,
  );

  it("elsewhere (or asked): watched; a sandbox whose workspace passes its size is stopped and says why", async () => {
    const watched = make("watch", { diskBytes: 8 * MB, disk: "watch", diskWatchMs: 100 });
    expect(watched.limits.disk).toMatch(/^watched every 100 ms/);
    const handle = await watched.start({
      sandboxId: "filler",
      spec: spec([
        "/bin/sh",
        "-c",
        "head -c 6000000 /dev/zero > a; head -c 6000000 /dev/zero > b; head -c 20000000 /dev/zero > c; echo c=$?; sleep 30",
      ]),
      sessionApiKey: key,
    });
    await vi.waitFor(async () => expect(await watched.inspect(handle)).toBe("error"), { timeout: 10_000 });
    expect(watched.failureReason(handle)).toMatch(/workspace holds \d+ MB, more than its 8 MB/);
    await watched.remove(handle);
  });

  it("refuses new workspaces while their file system has less free space than the reserve", async () => {
    const full = make("reserve", { diskReserveBytes: Number.MAX_SAFE_INTEGER });
    await expect(full.start({ sandboxId: "no-room", spec: spec([]), sessionApiKey: key })).rejects.toThrow(
      /kept in reserve/,
    );
    expect(existsSync(join(base, "reserve", "no-room"))).toBe(false);
  });
});

import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { directAgentUrl, networkFromServerLog } from "../helpers/agent-address.ts";
import {
  CLI,
  killServers,
  type StartedServer as Server,
  serviceEnv,
  startServer as startServerProcess,
} from "../helpers/server-process.ts";

// A hostile user's view of the process runtime: the real server (CLI `serve`) with two users, each with a sandbox
// whose agent runs the commands below. Whatever bob's sandbox tries against the server, its data and alice's
// sandbox must fail. Needs bubblewrap: where it is not installed the isolated part is skipped and says so (CI
// installs it); the fallback part (no bwrap: one user only) runs everywhere.

const bwrapMissing = spawnSync("bwrap", ["--version"]).error;
const skipReason = bwrapMissing ? `bubblewrap (bwrap) is not installed: ${bwrapMissing.message}` : null;
if (skipReason) console.log(`sandbox isolation tests skipped: ${skipReason}`);
const asRoot = process.getuid?.() === 0;

const dirs: string[] = [];
afterAll(() => {
  killServers("SIGTERM");
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function createKey(dir: string, user: string, extra: Record<string, string> = {}): string {
  const r = spawnSync(process.execPath, [CLI, "keys", "create", "--init", "--user", user], {
    env: serviceEnv(dir, extra),
    encoding: "utf8",
  });
  expect(r.status, r.stderr).toBe(0);
  return r.stdout.trim().split("\n").at(-1) ?? "";
}

const startServer = (dir: string, extra: Record<string, string>): Promise<Server> =>
  startServerProcess({ env: serviceEnv(dir, extra) });

interface Sandbox {
  id: string;
  status: string;
  session_api_key: string | null;
  exposed_urls: { name: string; url: string; port: number }[] | null;
}

/** Sandboxes outlive the server: every test deletes what it started before stopping its server. */
const started: { s: Server; userKey: string; id: string }[] = [];
async function deleteSandboxes(s: Server): Promise<void> {
  for (const sb of started.filter((x) => x.s === s)) {
    await fetch(`${s.url}/api/v1/sandboxes/${sb.id}`, {
      method: "DELETE",
      headers: { "x-session-api-key": sb.userKey },
    });
  }
}

/**
 * Starts a sandbox and waits until it runs. `url` is the agent's own URL (AGENT_SERVER_DIRECT: its loopback port, or
 * its address in a network of its own, as the server's start log says): these tests are about what runs in the
 * sandbox, so they talk to its agent directly; `viaService` is where the UI reaches it (AGENT_SERVER, "/": the
 * server's own origin, which forwards calls made with the sandbox's key).
 */
async function startSandbox(
  s: Server,
  key: string,
): Promise<{ id: string; url: string; viaService: string; key: string }> {
  const headers = { "x-session-api-key": key };
  const created = await fetch(`${s.url}/api/v1/sandboxes`, { method: "POST", headers });
  expect(created.status).toBe(200);
  const { id } = (await created.json()) as Sandbox;
  started.push({ s, userKey: key, id });
  const deadline = Date.now() + 20_000;
  for (;;) {
    const [sb] = (await (await fetch(`${s.url}/api/v1/sandboxes?id=${id}`, { headers })).json()) as Sandbox[];
    if (sb?.status === "RUNNING" && sb.exposed_urls && sb.session_api_key) {
      const [agentServer, direct] = sb.exposed_urls;
      // Each entry's port is the one its URL reaches: the server's own (where "/" resolves), and the agent's.
      expect(agentServer).toEqual({ name: "AGENT_SERVER", url: "/", port: Number(new URL(s.url).port) });
      expect(direct).toEqual({
        name: "AGENT_SERVER_DIRECT",
        url: expect.stringMatching(directAgentUrl(networkFromServerLog(s.output()))),
        port: expect.any(Number),
      });
      expect(new URL(direct?.url ?? "http://x").port).toBe(String(direct?.port));
      expect(sb.session_api_key).toMatch(new RegExp(`^sbx_${id}_[0-9A-Za-z]{43}$`));
      return {
        id,
        url: direct?.url ?? "",
        viaService: new URL(agentServer?.url ?? "", s.url).origin,
        key: sb.session_api_key,
      };
    }
    if (sb?.status === "ERROR" || Date.now() > deadline)
      throw new Error(`sandbox ${id}: ${JSON.stringify(sb)}\n${s.output()}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

interface Exec {
  exit_code: number;
  stdout: string;
  stderr: string;
}

async function run(sb: { url: string; key: string }, command: string): Promise<Exec> {
  const res = await fetch(`${sb.url}/api/bash/execute_bash_command`, {
    method: "POST",
    headers: { "x-session-api-key": sb.key, "content-type": "application/json" },
    body: JSON.stringify({ command, timeout: 30 }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Exec;
}

/** Host pids whose environment holds `marker` (this test runs as root or as the server's user: it can read them). */
function pidsWithEnv(marker: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/environ`, "latin1").includes(marker)) out.push(Number(name));
    } catch {
      // gone, or not ours
    }
  }
  return out;
}

/** What a search of the sandbox's file system covers: all but the system folders and the kernel's (/proc, /sys…). */
const SEARCHED = "/ --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude-dir=usr";

const mode = (path: string): string => (statSync(path).mode & 0o777).toString(8);

describe.skipIf(skipReason !== null)(
  `process sandboxes under bubblewrap${skipReason ? ` (skipped: ${skipReason})` : ""}`,
  () => {
    const serverKey = `server-env-${randomBytes(12).toString("hex")}`;
    let s: Server;
    let alice: { id: string; url: string; viaService: string; key: string };
    let bob: { id: string; url: string; viaService: string; key: string };
    let dir = "";

    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), "aws-isolation-"));
      dirs.push(dir);
      // An install made before DATA_DIR was restricted: the server tightens it.
      chmodSync(dir, 0o755);
      const aliceKey = createKey(dir, "alice");
      const bobKey = createKey(dir, "bob");
      s = await startServer(dir, {
        SANDBOX_ISOLATION: "bwrap",
        SESSION_API_KEY: serverKey,
        SANDBOX_PIDS_LIMIT: "64",
        SANDBOX_MEMORY_MB: "256",
        SANDBOX_TMP_MB: "16",
        SANDBOX_SHM_MB: "8",
        SANDBOX_DISK_MB: "64",
      });
      alice = await startSandbox(s, aliceKey);
      bob = await startSandbox(s, bobKey);
      expect((await run(alice, "echo alice-private > secret-notes.txt")).exit_code).toBe(0);
    }, 120_000);

    afterAll(async () => {
      if (!s) return;
      await deleteSandboxes(s);
      expect((await s.stop()).code).toBe(0);
    }, 60_000);

    /** A sandbox's workspace: `<sandboxes>/<id>`, or the warm agent's folder it was started from (`.claimed/<id>`). */
    const workspaceOf = (id: string): string => {
      const claimed = join(dir, "sandboxes", ".claimed", id);
      return join(dir, "sandboxes", existsSync(claimed) ? readFileSync(claimed, "utf8") : id);
    };
    /** Host pids of a sandbox: its workspace is their HOME (bwrap, the agent, and the commands it runs). */
    const pidsOf = (id: string): number[] => pidsWithEnv(`HOME=${workspaceOf(id)}\0`);

    it("says at start that sandboxes are isolated", () => {
      expect(s.output()).toContain("process sandboxes are isolated with bubblewrap");
    });

    it("is reached through the server's own origin too (the UI's way), with its key only", async () => {
      const direct = await run(bob, "pwd");
      expect(await run({ url: bob.viaService, key: bob.key }, "pwd")).toEqual(direct);
      // Alice's key through the server runs in alice's sandbox, never in bob's.
      expect((await run({ url: alice.viaService, key: alice.key }, "pwd")).stdout).toBe(
        `${workspaceOf(alice.id)}\n`,
      );
    });

    it("its own workspace is writable and is the working directory; /tmp is its own", async () => {
      const r = await run(
        bob,
        "pwd; echo mine > f.txt && cat f.txt; echo t > /tmp/bob-tmp && cat /tmp/bob-tmp",
      );
      expect(r).toMatchObject({ exit_code: 0, stdout: `${workspaceOf(bob.id)}\nmine\nt\n` });
      expect(readFileSync(join(workspaceOf(bob.id), "f.txt"), "utf8")).toBe("mine\n");
      expect(existsSync("/tmp/bob-tmp")).toBe(false);
      expect((await run(alice, "cat /tmp/bob-tmp")).exit_code).not.toBe(0);
    });

    it("cannot read the key file, the database or anything else of DATA_DIR", async () => {
      const key = readFileSync(join(dir, "secret.key"), "utf8").trim();
      for (const command of [
        `cat ${join(dir, "secret.key")}`,
        `cat ${join(dir, "workspace.sqlite")}`,
        `cat ${join(dir, "workspace.sqlite-wal")}`,
        `ls ${join(dir, "sandboxes", ".logs")}`,
        `ls ${workspaceOf(alice.id)}`,
      ]) {
        const r = await run(bob, command);
        expect(r.exit_code, command).not.toBe(0);
        expect(r.stdout, command).toBe("");
        expect(r.stdout + r.stderr).not.toContain(key);
      }
      // DATA_DIR is only the empty path down to its own workspace, the agents' compile cache (read-only) and, as
      // root, the execute-only copy of Node the built-in agent runs from (src/adapters/runtimes/process/agent-binary.ts).
      const listed = await run(bob, `ls -A ${dir}; ls -A ${join(dir, "sandboxes")}`);
      expect(listed.stdout).toBe(
        `sandboxes\n.cache\n${asRoot ? ".node\n" : ""}${basename(workspaceOf(bob.id))}\n`,
      );
      const cache = join(dir, "sandboxes", ".cache");
      expect((await run(bob, `touch ${cache}/planted`)).exit_code).not.toBe(0);
      expect(existsSync(join(cache, "planted"))).toBe(false);
      if (asRoot) {
        const copy = join(dir, "sandboxes", ".node");
        expect((await run(bob, `touch ${copy}/planted`)).exit_code).not.toBe(0);
        expect(existsSync(join(copy, "planted"))).toBe(false);
        // Executable, not readable (what keeps the agent's memory from its commands).
        expect((await run(bob, `head -c 4 ${copy}/node > /dev/null`)).exit_code).not.toBe(0);
      }
      // Not even by searching the whole file system it sees.
      const found = await run(bob, `grep -rlF '${key}' ${SEARCHED} 2>/dev/null; echo done`);
      expect(found.stdout).toBe("done\n");
    }, 60_000);

    it("cannot read or write another user's workspace", async () => {
      const other = workspaceOf(alice.id);
      for (const command of [
        `cat ${join(other, "secret-notes.txt")}`,
        `ls ${other}`,
        `echo x > ${join(other, "planted.txt")}`,
      ]) {
        const r = await run(bob, command);
        expect(r.exit_code, command).not.toBe(0);
        expect(r.stdout).not.toContain("alice-private");
      }
      expect(existsSync(join(other, "planted.txt"))).toBe(false);
      const grep = await run(bob, `grep -rlF alice-private ${SEARCHED} 2>/dev/null; echo done`);
      expect(grep.stdout).toBe("done\n");
    }, 60_000);

    it("sees no other process: not the server's environment, not another sandbox's, and cannot signal them", async () => {
      const serverPid = s.proc.pid ?? 0;
      const alicePids = pidsOf(alice.id);
      expect(alicePids.length).toBeGreaterThan(0);
      for (const pid of [serverPid, ...alicePids]) {
        const environ = await run(bob, `cat /proc/${pid}/environ`);
        expect(environ.stdout).not.toContain(serverKey);
        expect(environ.stdout).not.toContain(alice.key);
        const kill = await run(bob, `kill -0 ${pid}`);
        expect(kill.exit_code, `kill -0 ${pid}`).not.toBe(0);
      }
      // Every process it can see, with every environment it can read: its own sandbox only.
      const all = await run(
        bob,
        "for f in /proc/[0-9]*/environ; do cat $f; echo; done 2>/dev/null; ls /proc",
      );
      expect(all.stdout).not.toContain(serverKey);
      expect(all.stdout).not.toContain(alice.key);
      const pids = all.stdout
        .split("\n")
        .filter((l) => /^\d+$/.test(l))
        .map(Number);
      expect(Math.max(...pids)).toBeLessThan(100); // a fresh PID namespace
      expect(pids).not.toContain(serverPid);
    });

    it("runs with a scrubbed environment: its own key, the spec's variables and the basics only", async () => {
      const r = await run(bob, "env | cut -d= -f1 | sort");
      const names = r.stdout.trim().split("\n");
      expect(names).not.toContain("SESSION_API_KEY"); // the agent keeps its key from its commands
      expect(names).not.toContain("DATA_DIR");
      expect(names).not.toContain("ENCRYPTION_KEY_FILE");
      expect(r.stdout).not.toContain(serverKey);
      // The agent itself (pid 2 here, under bwrap's init) started with the sandbox's variables and nothing of the
      // server's. (A warm agent got its key later, on its stdin: not in its initial environment.)
      const own = await run(bob, "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | cut -d= -f1 | sort -u");
      expect(own.stdout.split("\n")).toContain("WORKSPACE_DIR");
      expect(own.stdout).not.toContain("DATA_DIR");
      expect(own.stdout).not.toContain(serverKey);
    });

    it.skipIf(!asRoot)(
      "as root, each sandbox runs as its own unprivileged uid that owns only its workspace",
      async () => {
        const a = await run(alice, "id -u; id -g; id -G; cat /proc/self/status");
        const b = await run(bob, "id -u; id -g; cat /proc/self/status");
        const [aUid] = a.stdout.split("\n");
        const [bUid] = b.stdout.split("\n");
        expect(Number(aUid)).toBeGreaterThan(0);
        expect(Number(bUid)).toBeGreaterThan(0);
        expect(aUid).not.toBe(bUid);
        expect(a.stdout.split("\n")[2]).toBe(a.stdout.split("\n")[1]); // no supplementary groups
        expect(b.stdout).toMatch(/^CapEff:\t0000000000000000$/m);
        expect(b.stdout).toMatch(/^CapBnd:\t0000000000000000$/m);
        expect(b.stdout).toMatch(/^NoNewPrivs:\t1$/m);
        expect(statSync(workspaceOf(alice.id)).uid).toBe(Number(aUid));
        expect(statSync(workspaceOf(bob.id)).uid).toBe(Number(bUid));
        expect(statSync(join(workspaceOf(bob.id), "f.txt")).uid).toBe(Number(bUid));
      },
    );

    it("keeps DATA_DIR 0700, the database and key files 0600, the workspaces 0700", () => {
      expect(mode(dir)).toBe("700");
      expect(mode(join(dir, "secret.key"))).toBe("600");
      for (const f of ["workspace.sqlite", "workspace.sqlite-wal", "workspace.sqlite-shm"]) {
        if (f === "workspace.sqlite" || existsSync(join(dir, f))) expect(mode(join(dir, f)), f).toBe("600");
      }
      expect(existsSync(join(dir, "workspace.sqlite-wal"))).toBe(true);
      expect(mode(join(dir, "sandboxes"))).toBe("700");
      expect(mode(workspaceOf(alice.id))).toBe("700");
      expect(mode(workspaceOf(bob.id))).toBe("700");
    });

    it("pauses, resumes and removes an isolated sandbox with everything it runs", async () => {
      const headers = { "x-session-api-key": createKey(dir, "carol") };
      const carol = await startSandbox(s, headers["x-session-api-key"]);
      await run(carol, "sleep 300 > /dev/null 2>&1 &");
      const pids = pidsOf(carol.id);
      expect(pids.length).toBeGreaterThan(1);
      const post = (path: string, method = "POST") =>
        fetch(`${s.url}/api/v1/sandboxes/${carol.id}${path}`, { method, headers });
      expect((await post("/pause")).status).toBe(200);
      const stateOf = (pid: number): string | undefined =>
        readFileSync(`/proc/${pid}/stat`, "latin1")
          .slice(readFileSync(`/proc/${pid}/stat`, "latin1").lastIndexOf(")") + 2)
          .split(" ")[0];
      for (const pid of pids) expect(stateOf(pid), `pid ${pid}`).toBe("T");
      expect((await post("/resume")).status).toBe(200);
      const resumed = await startSandboxState(s, headers["x-session-api-key"], carol.id, "RUNNING");
      expect(resumed).toBe(true);
      expect((await run(carol, "echo back")).stdout).toBe("back\n");
      expect((await post("", "DELETE")).status).toBe(200);
      for (let i = 0; i < 200 && pids.some((p) => existsSync(`/proc/${p}`)); i++) {
        await new Promise((r) => setTimeout(r, 25));
      }
      expect(pids.filter((p) => existsSync(`/proc/${p}`))).toEqual([]);
      expect(existsSync(workspaceOf(carol.id))).toBe(false);
    }, 90_000);

    it("says at start which limits hold and how", () => {
      const line = s
        .output()
        .split("\n")
        .find((l) => l.includes('"process sandbox limits enforced"'));
      expect(line).toBeDefined();
      const { limits } = JSON.parse(line ?? "{}") as { limits: Record<string, string> };
      expect(limits.nestedUserNamespaces).toMatch(/refused/);
      expect(limits.tmp).toBe(`tmpfs of ${16 * 1024 * 1024} bytes`);
      expect(limits.pids).toMatch(/^(cgroup v[12]|rlimit|not enforced)/);
      expect(limits.disk).toMatch(/^(loop-mounted ext4 of 67108864 bytes|watched every)/);
    });

    it("cannot fill the disk: its workspace holds its size at most, and the server keeps storing", async () => {
      const line = s
        .output()
        .split("\n")
        .find((l) => l.includes('"process sandbox limits enforced"'));
      if (!/loop-mounted/.test(line ?? ""))
        return console.log("workspaces are watched here: checked by the runtime tests");
      const r = await run(bob, "head -c 100000000 /dev/zero > fill; echo rc=$?; rm -f fill");
      expect(r.stdout).toContain("rc=1");
      expect(r.stderr).toMatch(/No space left/);
      // The server's own store is elsewhere and still takes writes.
      const key = createKey(dir, "dave");
      const saved = await fetch(`${s.url}/api/settings`, {
        method: "POST",
        headers: { "x-session-api-key": key, "content-type": "application/json" },
        body: JSON.stringify({ llm_model: "openai/gpt-test" }),
      });
      expect(saved.status).toBe(200);
    });

    it("cannot make a nested user namespace (no capabilities back)", async () => {
      const r = await run(bob, "unshare -U -r id; echo rc=$?");
      expect(r.stdout).not.toContain("uid=0");
      expect(r.stdout).toContain("rc=1");
    });

    it("cannot fill /tmp or /dev/shm beyond their sizes", async () => {
      const r = await run(
        bob,
        "head -c 20000000 /dev/zero > /tmp/big; echo tmp=$?; head -c 10000000 /dev/zero > /dev/shm/big; echo shm=$?; rm -f /tmp/big /dev/shm/big",
      );
      expect(r.stdout).toContain("tmp=1");
      expect(r.stdout).toContain("shm=1");
    });

    it("cannot run more processes or hold more memory than its limits", async () => {
      const line = s
        .output()
        .split("\n")
        .find((l) => l.includes('"process sandbox limits enforced"'));
      if (!/cgroup/.test(line ?? ""))
        return console.log("limits are not cgroups here: checked by the runtime tests");
      const bombScript =
        "const {spawn}=require('child_process');const kids=[];for(let i=0;i<3000;i++){const c=spawn('sleep',['30']);c.on('error',()=>{});if(c.pid)kids.push(c)}setTimeout(()=>{for(const c of kids)c.kill();console.log('started='+kids.length)},300)";
      const bomb = await run(bob, `${process.execPath} -e "${bombScript}"`);
      const started = Number(/started=(\d+)/.exec(bomb.stdout)?.[1] ?? -1);
      expect(started).toBeGreaterThan(0);
      expect(started).toBeLessThan(64);
      const hog = await run(
        bob,
        `${process.execPath} -e "const a=[];for(let i=0;i<60;i++)a.push(Buffer.alloc(10*1024*1024,1));console.log('kept')"; echo "exit=$?"`,
      );
      expect(hog.stdout).not.toContain("kept");
      expect(hog.stdout).toContain("exit=137");
      expect((await run(bob, "echo alive")).stdout).toBe("alive\n");
    }, 60_000);
  },
);

async function startSandboxState(s: Server, key: string, id: string, status: string): Promise<boolean> {
  const headers = { "x-session-api-key": key };
  for (let i = 0; i < 400; i++) {
    const [sb] = (await (await fetch(`${s.url}/api/v1/sandboxes?id=${id}`, { headers })).json()) as Sandbox[];
    if (sb?.status === status) return true;
    await new Promise((r) => setTimeout(r, 25));
  }
  return false;
}

describe("process sandboxes where bubblewrap cannot run", () => {
  // A PATH without bwrap: as on a machine without bubblewrap.
  const nodeOnlyPath = dirname(process.execPath);

  it("SANDBOX_ISOLATION=bwrap refuses to start", async () => {
    const dir = mkdtempSync(join(tmpdir(), "aws-isolation-"));
    dirs.push(dir);
    const r = spawnSync(process.execPath, [CLI, "serve"], {
      env: serviceEnv(dir, { PATH: nodeOnlyPath, SANDBOX_ISOLATION: "bwrap" }),
      encoding: "utf8",
      timeout: 20_000,
    });
    expect(r.status).toBe(1);
    expect(r.stdout + r.stderr).toContain(
      "SANDBOX_ISOLATION=bwrap, but bubblewrap cannot run sandboxes here",
    );
  }, 90_000);

  it("auto: warns loudly at start and starts sandboxes for one user only", async () => {
    const dir = mkdtempSync(join(tmpdir(), "aws-isolation-"));
    dirs.push(dir);
    const aliceKey = createKey(dir, "alice");
    const bobKey = createKey(dir, "bob");
    const s = await startServer(dir, { PATH: nodeOnlyPath });
    try {
      expect(s.output()).toMatch(/"level":40.*process sandboxes are NOT isolated/);
      await startSandbox(s, aliceKey);
      const refused = await fetch(`${s.url}/api/v1/sandboxes`, {
        method: "POST",
        headers: { "x-session-api-key": bobKey },
      });
      expect(refused.status).toBe(409);
      expect(await refused.text()).toContain("SANDBOX_ISOLATION=none");
      // Nothing was recorded for bob.
      const list = await fetch(`${s.url}/api/v1/sandboxes/search`, {
        headers: { "x-session-api-key": bobKey },
      });
      expect(((await list.json()) as { items: unknown[] }).items).toEqual([]);
    } finally {
      await deleteSandboxes(s);
      expect((await s.stop()).code).toBe(0);
    }
    // Still one user after a restart.
    const again = await startServer(dir, { PATH: nodeOnlyPath });
    try {
      const refused = await fetch(`${again.url}/api/v1/sandboxes`, {
        method: "POST",
        headers: { "x-session-api-key": bobKey },
      });
      expect(refused.status).toBe(409);
    } finally {
      expect((await again.stop()).code).toBe(0);
    }
  }, 90_000);

  it("SANDBOX_ISOLATION=none: every user, with a warning at start", async () => {
    const dir = mkdtempSync(join(tmpdir(), "aws-isolation-"));
    dirs.push(dir);
    const aliceKey = createKey(dir, "alice");
    const bobKey = createKey(dir, "bob");
    const s = await startServer(dir, { PATH: nodeOnlyPath, SANDBOX_ISOLATION: "none" });
    try {
      expect(s.output()).toMatch(/"level":40.*SANDBOX_ISOLATION=none: process sandboxes are NOT isolated/);
      await startSandbox(s, aliceKey);
      await startSandbox(s, bobKey);
    } finally {
      await deleteSandboxes(s);
      expect((await s.stop()).code).toBe(0);
    }
  }, 90_000);
});

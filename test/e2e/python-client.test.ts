// The Python client generated from proto/ (clients/python): generate.sh with Debian's protoc 3.21 and
// grpc_python_plugin, then example.py, run by Debian's /usr/bin/python3 (python3-grpcio, python3-protobuf), against
// the real server process: stores and reads settings, starts, pauses, resumes and deletes a sandbox. The settings are
// then checked over REST. .ci/python-client.sh installs the toolchain in CI; without it the test skips and says why.
// /usr/bin/python3 is used explicitly: a `python3` earlier on PATH (e.g. pyenv's) does not see Debian's packages.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { directAgentUrl, networkFromServerLog } from "../helpers/agent-address.ts";
import { CLI, killServers, serviceEnv, spawnServer } from "../helpers/server-process.ts";

const root = join(import.meta.dirname, "..", "..");
const generate = join(root, "clients", "python", "generate.sh");
const example = join(root, "clients", "python", "example.py");
const python = "/usr/bin/python3";

function findSkipReason(): string | null {
  const missing: string[] = [];
  for (const tool of ["protoc", "grpc_python_plugin"]) {
    if (spawnSync("sh", ["-c", `command -v ${tool}`]).status !== 0) missing.push(tool);
  }
  if (!existsSync("/usr/include/google/protobuf/timestamp.proto"))
    missing.push("google/protobuf/*.proto in /usr/include (libprotobuf-dev)");
  const imported = spawnSync(python, ["-c", "import grpc, google.protobuf"], { encoding: "utf8" });
  if (imported.status !== 0)
    missing.push(`${python} with grpc and google.protobuf (python3-grpcio, python3-protobuf)`);
  return missing.length > 0
    ? `missing ${missing.join(", ")}; install with: source .ci/python-client.sh && python_client_up`
    : null;
}

const skipReason = findSkipReason();
if (skipReason) console.log(`python client test skipped: ${skipReason}`);

/** Runs a command without blocking the event loop (the server child's output must keep draining meanwhile). */
function run(
  cmd: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    p.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    p.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    p.on("error", reject);
    p.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

describe.skipIf(skipReason !== null)(
  `Python client generated from the protos${skipReason ? ` (skipped: ${skipReason})` : ""}`,
  () => {
    let dir = "";
    let gen = "";
    let dataDir = "";

    const baseEnv = () => serviceEnv(dataDir);

    beforeAll(() => {
      dir = mkdtempSync(join(tmpdir(), "aws-python-"));
      gen = join(dir, "gen");
      dataDir = join(dir, "data");
    });

    afterAll(() => {
      killServers();
      rmSync(dir, { recursive: true, force: true });
    });

    it("generate.sh writes the messages and gRPC stubs of every proto", async () => {
      const r = await run("bash", [generate, gen], { PATH: process.env.PATH ?? "" });
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(r.stdout).toContain("libprotoc 3.");
      const files = readdirSync(join(gen, "workspace", "v1"));
      for (const name of ["settings", "sandbox", "sandbox_spec", "secrets"]) {
        expect(files).toContain(`${name}_pb2.py`);
        expect(files).toContain(`${name}_pb2_grpc.py`);
      }
    }, 60_000);

    it("example.py stores and reads settings and starts, pauses, resumes and deletes a sandbox over gRPC", async () => {
      // A key of its own user, made by the CLI (printed alone on the last line).
      const created = spawnSync(process.execPath, [CLI, "keys", "create", "--init", "--user", "python"], {
        env: baseEnv(),
        encoding: "utf8",
      });
      expect(created.status).toBe(0);
      const key = created.stdout.trim().split("\n").at(-1) ?? "";
      expect(key).toMatch(/^ws_/);

      const server = spawnServer({ env: baseEnv() });
      const listening = await server.listening(20_000);

      const r = await run(python, [example, "--grpc", listening.grpc, "--key", key, "--gen", gen], {
        PATH: "/usr/bin:/bin",
        HOME: process.env.HOME ?? "/tmp",
        PYTHONDONTWRITEBYTECODE: "1",
      });
      if (r.code !== 0) console.error(`example.py failed:\n${r.stdout}\n${r.stderr}`);
      expect(r.code).toBe(0);
      expect(r.stderr).toBe("");
      const lines = r.stdout.trim().split("\n");
      expect(lines).toEqual([
        "StoreSettings: Settings stored",
        "GetSettings: language=de llm_model=anthropic/claude-sonnet-4-5 llm_api_key_set=True",
        expect.stringMatching(/^StartSandbox: \S+ \(spec workspace-agent, (STARTING|RUNNING)\)$/),
        // The agent through this service's origin, then its own URL (docs/agent-proxy.md): its loopback port, or
        // its address on port 8000 when sandboxes have networks of their own.
        expect.stringMatching(/^RUNNING: \S+ \(AGENT_SERVER=\/, AGENT_SERVER_DIRECT=\S+\)$/),
        expect.stringMatching(/^PauseSandbox: \S+ is PAUSED$/),
        expect.stringMatching(/^ResumeSandbox: \S+$/),
        expect.stringMatching(/^RUNNING: \S+$/),
        expect.stringMatching(/^DeleteSandbox: \S+$/),
        "done",
      ]);
      const direct = /AGENT_SERVER_DIRECT=(\S+)\)$/.exec(lines[3] ?? "")?.[1] ?? "";
      expect(direct).toMatch(directAgentUrl(networkFromServerLog(server.output())));
      const sandboxId = /^StartSandbox: (\S+)/.exec(lines[2] ?? "")?.[1] ?? "";
      expect(sandboxId).not.toBe("");

      // What the Python client stored is what REST serves; the API key is stored but never returned.
      const headers = { "x-session-api-key": key };
      const settings = await fetch(`${listening.http}/api/settings`, { headers });
      expect(settings.status).toBe(200);
      expect(await settings.json()).toMatchObject({
        language: "de",
        llm_model: "anthropic/claude-sonnet-4-5",
        llm_api_key: null,
        llm_api_key_set: true,
      });
      // The script deleted its sandbox: gone from the API and from disk.
      const batch = await fetch(`${listening.http}/api/v1/sandboxes?id=${sandboxId}`, { headers });
      expect(await batch.json()).toEqual([null]);
      expect(existsSync(join(dataDir, "sandboxes", sandboxId))).toBe(false);

      const { code: exit, output: serverOut } = await server.stop();
      expect(exit).toBe(0);
      expect(serverOut).not.toContain("sk-example-python-client");
    }, 120_000);
  },
);

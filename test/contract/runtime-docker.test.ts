import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BUILTIN_AGENT_COMMAND } from "../../agent/shared/builtin-agent.ts";
import { probeAlive } from "../../src/adapters/runtimes/agent-health.ts";
import {
  createDockerRuntime,
  type DockerRuntime,
} from "../../src/adapters/runtimes/docker/docker-runtime.ts";
import type { RuntimeHandle, RuntimeSpec } from "../../src/ports/sandbox-runtime.ts";
import { dockerFromEnv, findDocker } from "../helpers/docker-env.ts";
import { describeRuntimeContract } from "./runtime-contract.ts";

// Runs against the engine of DOCKER_HOST (unix:// or tcp://) or /var/run/docker.sock, with the image named by
// WORKSPACE_TEST_DOCKER_IMAGE (built offline by .ci/docker.sh: Node + the built-in agent as default command).
// Sandbox containers use --network host (or none): nothing here talks to bridge addresses.

const docker = dockerFromEnv();

const found = await findDocker(docker);
const skipReason = typeof found === "string" ? found : null;
if (skipReason) console.log(`docker runtime tests skipped: ${skipReason}`);

const runLabel = "workspace.test-run";
const runId = randomBytes(4).toString("hex");
const image = typeof found === "string" ? "unused" : found.image;
const runtimes: DockerRuntime[] = [];
const makeRuntime = (
  options: {
    network?: string;
    memoryBytes?: number;
    pidsLimit?: number;
    shmBytes?: number;
    nanoCpus?: number;
    readOnlyPaths?: string[];
  } = {},
): DockerRuntime => {
  const runtime = createDockerRuntime({
    docker,
    network: "host",
    labels: { [runLabel]: runId },
    stopTimeoutSeconds: 2,
    ...options,
  });
  runtimes.push(runtime);
  return runtime;
};

interface Data {
  containerId: string;
  volume: string;
}
const dataOf = (handle: RuntimeHandle): Data => handle.data as unknown as Data;
const spec = (command: string[], initialEnv: Record<string, string> = {}): RuntimeSpec => ({
  id: image,
  command,
  initialEnv,
  workingDir: "/workspace/project",
});
const statusOf = (e: unknown): number | undefined => (e as { statusCode?: number }).statusCode;
const exists = async (get: () => Promise<unknown>): Promise<boolean> => {
  try {
    await get();
    return true;
  } catch (e: unknown) {
    if (statusOf(e) === 404) return false;
    throw e;
  }
};

const cleanup = async (): Promise<void> => {
  if (skipReason) return;
  await makeRuntime().removeAll();
};

describe.skipIf(skipReason !== null)(`docker runtime${skipReason ? ` (skipped: ${skipReason})` : ""}`, () => {
  afterAll(cleanup);

  describeRuntimeContract(
    "docker (network host)",
    () => makeRuntime(),
    (kind) =>
      kind === "agent" ? spec([], { CONTRACT_FOO: "bar" }) : spec(["/bin/sh", "-c", "sleep 0.2; exit 1"]),
    {
      async destroyBehindBack(handle) {
        await docker.getContainer(dataOf(handle).containerId).remove({ force: true });
      },
      // A removed container is gone for everyone; see below for a killed (exited) one.
      afterDestroy: { sameInstance: "missing", freshInstance: "missing" },
      async leftovers(handle) {
        const { containerId, volume } = dataOf(handle);
        const out: string[] = [];
        if (await exists(() => docker.getContainer(containerId).inspect()))
          out.push(`container ${containerId}`);
        if (await exists(() => docker.getVolume(volume).inspect())) out.push(`volume ${volume}`);
        return out;
      },
      workspacePath: () => "/workspace/project",
      cleanup,
      healthyTimeoutMs: 30_000,
    },
  );

  describe("docker runtime specifics", () => {
    const runtime = makeRuntime();
    const key = "docker-specifics-key";
    const start = (s: RuntimeSpec): Promise<RuntimeHandle> =>
      runtime.start({ sandboxId: `dt${randomBytes(6).toString("hex")}`, spec: s, sessionApiKey: key });

    it("labels the container, mounts the workspace volume, applies limits and the session key", async () => {
      const limited = makeRuntime({
        memoryBytes: 256 * 1024 * 1024,
        pidsLimit: 256,
        shmBytes: 8 * 1024 * 1024,
        nanoCpus: 500_000_000,
      });
      const handle = await limited.start({ sandboxId: "dt-labels", spec: spec([]), sessionApiKey: key });
      try {
        const info = await docker.getContainer(dataOf(handle).containerId).inspect();
        expect(info.Name).toBe("/oh-agent-server-dt-labels");
        expect(info.Config.Labels).toMatchObject({
          "workspace.managed": "true",
          "workspace.sandbox.id": "dt-labels",
          "workspace.volume": "openhands-workspace-dt-labels",
          [runLabel]: runId,
        });
        expect(info.HostConfig.NetworkMode).toBe("host");
        expect(info.HostConfig.Memory).toBe(256 * 1024 * 1024);
        expect(info.HostConfig.PidsLimit).toBe(256);
        expect(info.HostConfig.ShmSize).toBe(8 * 1024 * 1024);
        expect(info.HostConfig.NanoCpus).toBe(500_000_000);
        expect(info.Mounts).toContainEqual(
          expect.objectContaining({
            Type: "volume",
            Name: "openhands-workspace-dt-labels",
            Destination: "/workspace/project",
          }),
        );
        expect(info.Config.Env).toEqual(
          expect.arrayContaining([
            `OH_SESSION_API_KEYS_0=${key}`,
            `SESSION_API_KEY=${key}`,
            `PORT=${handle.port}`,
          ]),
        );
      } finally {
        await limited.remove(handle);
      }
    });

    it("runs an image without a user as 1000:1000, without capabilities or new privileges, with default limits and no host path", async () => {
      const handle = await runtime.start({ sandboxId: "dt-confined", spec: spec([]), sessionApiKey: key });
      try {
        const info = await docker.getContainer(dataOf(handle).containerId).inspect();
        expect(info.Config.User).toBe("1000:1000");
        expect(info.HostConfig.Privileged).toBe(false);
        expect(info.HostConfig.CapDrop).toEqual(["ALL"]);
        expect(info.HostConfig.CapAdd ?? []).toEqual([]);
        expect(info.HostConfig.SecurityOpt).toEqual(["no-new-privileges"]);
        // Sized for the agent-server's browser and VS Code.
        expect(info.HostConfig.PidsLimit).toBe(2048);
        expect(info.HostConfig.Memory).toBe(4096 * 1024 * 1024);
        expect(info.HostConfig.ShmSize).toBe(512 * 1024 * 1024);
        // Its output as the engine keeps it is bounded.
        expect(info.HostConfig.LogConfig).toEqual({
          Type: "json-file",
          Config: { "max-size": "10m", "max-file": "2" },
        });
        expect(info.HostConfig.Binds ?? []).toEqual([]);
        // The only mount is the workspace volume: no host folder.
        expect(info.Mounts.map((m) => [m.Type, m.Destination])).toEqual([["volume", "/workspace/project"]]);
        expect(await runtime.waitHealthy(handle, 30_000)).toBe(true);
        const res = await fetch(new URL("/api/bash/execute_bash_command", handle.agentUrl), {
          method: "POST",
          headers: { "x-session-api-key": key },
          body: JSON.stringify({
            command: "id -u; id -g; echo data > owned.txt && cat owned.txt && cat /proc/self/status",
          }),
        });
        const out = (await res.json()) as { exit_code: number; stdout: string };
        expect(out.stdout).toMatch(/^1000\n1000\ndata\n/);
        expect(out.stdout).toMatch(/^CapEff:\t0000000000000000$/m);
        expect(out.stdout).toMatch(/^CapBnd:\t0000000000000000$/m);
        expect(out.stdout).toMatch(/^NoNewPrivs:\t1$/m);
        expect(out.exit_code).toBe(0);
      } finally {
        await runtime.remove(handle);
      }
    });

    it("binds the LOCAL_REPOSITORY_ROOTS folders read-only at the same path, and nothing else of the host", async () => {
      const root = mkdtempSync(join(tmpdir(), "aws-docker-roots-"));
      chmodSync(root, 0o755);
      writeFileSync(join(root, "file.txt"), "from the host\n", { mode: 0o644 });
      const bound = makeRuntime({ readOnlyPaths: [root] });
      const handle = await bound.start({ sandboxId: "dt-roots", spec: spec([]), sessionApiKey: key });
      try {
        const info = await docker.getContainer(dataOf(handle).containerId).inspect();
        expect(info.Mounts.map((m) => [m.Type, m.Destination, m.RW])).toEqual(
          expect.arrayContaining([
            ["volume", "/workspace/project", true],
            ["bind", root, false],
          ]),
        );
        expect(info.Mounts).toHaveLength(2);
        expect(await bound.waitHealthy(handle, 30_000)).toBe(true);
        const res = await fetch(new URL("/api/bash/execute_bash_command", handle.agentUrl), {
          method: "POST",
          headers: { "x-session-api-key": key },
          body: JSON.stringify({ command: `cat ${root}/file.txt; touch ${root}/new.txt || echo refused` }),
        });
        const out = (await res.json()) as { stdout: string };
        expect(out.stdout).toContain("from the host\n");
        expect(out.stdout).toContain("refused");
        expect(existsSync(join(root, "new.txt"))).toBe(false);
      } finally {
        await bound.remove(handle);
        rmSync(root, { recursive: true, force: true });
      }
    });

    it("runs the image's default command plus the arguments after the built-in marker, {port} replaced", async () => {
      const handle = await start(spec([BUILTIN_AGENT_COMMAND, "--port", "{port}"]));
      try {
        const info = await docker.getContainer(dataOf(handle).containerId).inspect();
        expect(info.Config.Cmd?.slice(-2)).toEqual(["--port", String(handle.port)]);
        expect(await runtime.waitHealthy(handle, 30_000)).toBe(true);
      } finally {
        await runtime.remove(handle);
      }
    });

    it("a container killed behind the runtime's back is error; one stopped cleanly is paused and resumes", async () => {
      const killed = await start(spec([]));
      const stopped = await start(spec([]));
      expect(await runtime.waitHealthy(killed, 30_000)).toBe(true);
      expect(await runtime.waitHealthy(stopped, 30_000)).toBe(true);
      await docker.getContainer(dataOf(killed).containerId).kill();
      await docker.getContainer(dataOf(stopped).containerId).stop({ t: 5 });
      expect(await runtime.inspect(killed)).toBe("error");
      expect(await runtime.inspect(stopped)).toBe("paused");
      const resumed = await runtime.resume(stopped);
      expect(await runtime.waitHealthy(resumed, 30_000)).toBe(true);
      expect(await runtime.inspect(resumed)).toBe("running");
      await runtime.remove(killed);
      await runtime.remove(resumed);
    });

    it("with network none the container runs isolated: healthy when running, its agent unreachable", async () => {
      const isolated = makeRuntime({ network: "none" });
      const handle = await isolated.start({ sandboxId: "dt-none", spec: spec([]), sessionApiKey: key });
      try {
        expect(await isolated.waitHealthy(handle, 30_000)).toBe(true);
        expect(await isolated.inspect(handle)).toBe("running");
        expect(handle.port).toBe(0);
        expect(await probeAlive(handle.agentUrl, 300)).toBe(false);
        const info = await docker.getContainer(dataOf(handle).containerId).inspect();
        expect(info.HostConfig.NetworkMode).toBe("none");
        await isolated.pause(handle);
        expect(await isolated.inspect(handle)).toBe("paused");
      } finally {
        await isolated.remove(handle);
      }
    });

    it("fails to start when the image can neither be found nor pulled, leaving nothing behind", async () => {
      const events: string[] = [];
      const offline = createDockerRuntime({
        docker,
        labels: { [runLabel]: runId },
        log: (msg) => events.push(msg),
      });
      await expect(
        offline.start({
          sandboxId: "dt-noimage",
          spec: { ...spec([]), id: "127.0.0.1:1/nope/missing:latest" },
          sessionApiKey: key,
        }),
      ).rejects.toThrow();
      expect(events).toContain("pulling image");
      expect(await exists(() => docker.getContainer("oh-agent-server-dt-noimage").inspect())).toBe(false);
      expect(await exists(() => docker.getVolume("openhands-workspace-dt-noimage").inspect())).toBe(false);
    });

    it("never touches a container it does not manage", async () => {
      const foreign = await docker.createContainer({
        Image: image,
        Cmd: ["/bin/sh", "-c", "sleep 30"],
        Labels: { [runLabel]: runId },
      });
      try {
        const handle: RuntimeHandle = {
          data: {
            containerId: foreign.id,
            containerName: "foreign",
            volume: "openhands-workspace-foreign",
            network: "host",
          },
          agentUrl: "http://127.0.0.1:9",
          port: 9,
        };
        expect(await runtime.inspect(handle)).toBe("missing");
        await runtime.remove(handle);
        expect(await exists(() => foreign.inspect())).toBe(true);
      } finally {
        await foreign.remove({ force: true });
      }
    });
  });
});

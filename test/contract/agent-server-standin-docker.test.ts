import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type Docker from "dockerode";
import { afterAll, describe, expect, it } from "vitest";
import { dockerFromEnv, findAgentServerImage } from "../helpers/docker-env.ts";

// The stand-in agent-server image (WORKSPACE_TEST_AGENT_SERVER_IMAGE, built offline by .ci/docker.sh) behaves like
// the real image at boot: it runs as its own user (openhands, 10001), which alone can create the state folders in
// /workspace, answers /alive after the boot delay, and dies with uvicorn's status 3 when run as another user.
// Containers use --network host and listen on loopback ports only.

const docker = dockerFromEnv();
const found = await findAgentServerImage(docker);
const skipReason = typeof found === "string" ? found : null;
if (skipReason) console.log(`agent-server stand-in image tests skipped: ${skipReason}`);
const image = typeof found === "string" ? "unused" : found.image;
const runLabel = "workspace.test-run";
const runId = randomBytes(4).toString("hex");
const KEY = `key-${runId}`;
const containers: Docker.Container[] = [];

afterAll(async () => {
  for (const c of containers) await c.remove({ force: true }).catch(() => undefined);
});

const freePort = async (): Promise<number> => {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as AddressInfo).port;
  await new Promise((r) => srv.close(r));
  return port;
};

async function run(port: number, user?: string): Promise<Docker.Container> {
  const container = await docker.createContainer({
    Image: image,
    Cmd: ["--host", "127.0.0.1", "--port", String(port)],
    Env: [`OH_SESSION_API_KEYS_0=${KEY}`, "STANDIN_BOOT_DELAY_MS=1500", "OH_ENABLE_VSCODE=false"],
    Labels: { [runLabel]: runId },
    ...(user === undefined ? {} : { User: user }),
    HostConfig: { NetworkMode: "host" },
  });
  containers.push(container);
  await container.start();
  return container;
}

const alive = (port: number): Promise<boolean> =>
  fetch(`http://127.0.0.1:${port}/alive`, { signal: AbortSignal.timeout(1000) }).then(
    (r) => r.ok,
    () => false,
  );

describe.skipIf(skipReason !== null)("agent-server stand-in image", () => {
  it("is laid out like the real image: user openhands, entrypoint, /workspace owned by 10001", async () => {
    const info = await docker.getImage(image).inspect();
    expect(info.Config.User).toBe("openhands");
    expect(info.Config.Entrypoint).toEqual(["/usr/local/bin/openhands-agent-server"]);
    expect(info.Config.WorkingDir).toBe("/");
    expect(info.Config.Env).toEqual(expect.arrayContaining(["OH_ENABLE_VNC=false", "LOG_JSON=true"]));
  });

  it("boots as its own user, answers /alive only after the boot delay, and runs commands as uid 10001", async () => {
    const port = await freePort();
    const started = Date.now();
    const container = await run(port);
    await new Promise((r) => setTimeout(r, 300));
    expect(await alive(port)).toBe(false);
    let up = false;
    while (!up && Date.now() - started < 20_000) {
      up = await alive(port);
      if (!up) await new Promise((r) => setTimeout(r, 100));
    }
    expect(up).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1500);
    const res = await fetch(`http://127.0.0.1:${port}/api/bash/execute_bash_command`, {
      method: "POST",
      headers: { "X-Session-API-Key": KEY, "content-type": "application/json" },
      body: JSON.stringify({ command: "id -u; ls /workspace" }),
    });
    expect(res.status).toBe(200);
    const out = (await res.json()) as { exit_code: number; stdout: string };
    expect(out.exit_code).toBe(0);
    expect(out.stdout.split("\n")).toEqual(
      expect.arrayContaining(["10001", "conversations", "bash_events", "project"]),
    );
    await container.stop({ t: 2 });
    expect((await container.wait()).StatusCode).toBe(0);
  });

  it("exits with status 3 when run as --user 1000:1000 (it cannot create /workspace/conversations)", async () => {
    const port = await freePort();
    const container = await run(port, "1000:1000");
    const result = (await Promise.race([
      container.wait(),
      new Promise((_, reject) => setTimeout(() => reject(new Error("the container did not exit")), 20_000)),
    ])) as { StatusCode: number };
    expect(result.StatusCode).toBe(3);
    const logs = (await container.logs({ stdout: true, stderr: true })).toString();
    expect(logs).toContain("Application startup failed");
    expect(await alive(port)).toBe(false);
  });
});

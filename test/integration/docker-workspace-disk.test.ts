import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BUILTIN_AGENT_COMMAND } from "../../agent/shared/builtin-agent.ts";
import { createDockerRuntime } from "../../src/adapters/runtimes/docker/docker-runtime.ts";
import type { RuntimeHandle } from "../../src/ports/sandbox-runtime.ts";
import { dockerFromEnv, findDocker } from "../helpers/docker-env.ts";

// SANDBOX_DISK_MB on the Docker runtime: the workspace volume is an ext4 file system of that size on a loop device,
// so writing past it fails with ENOSPC inside the container. Skips, saying why, where Docker, the test image, root
// or loop devices are missing.
const docker = dockerFromEnv();
const found = await findDocker(docker);
const dir = mkdtempSync(join(tmpdir(), "aws-docker-disks-"));
const runtime = createDockerRuntime({
  docker,
  network: "host",
  labels: { "workspace.test-run": randomBytes(4).toString("hex") },
  stopTimeoutSeconds: 1,
  diskBytes: 32 * 1024 * 1024,
  diskDir: dir,
});
const skip =
  typeof found === "string"
    ? found
    : runtime.workspaceLimit.startsWith("not limited")
      ? runtime.workspaceLimit
      : null;
if (skip) console.log(`docker workspace size tests skipped: ${skip}`);

describe.skipIf(skip !== null)("SANDBOX_DISK_MB on the Docker runtime", () => {
  afterAll(async () => {
    await runtime.removeAll();
    rmSync(dir, { recursive: true, force: true });
  });

  const exec = async (handle: RuntimeHandle, key: string, command: string) => {
    const res = await fetch(new URL("/api/bash/execute_bash_command", handle.agentUrl), {
      method: "POST",
      headers: { "x-session-api-key": key, "content-type": "application/json" },
      body: JSON.stringify({ command, timeout: 60 }),
    });
    expect(res.status).toBe(200);
    return (await res.json()) as { exit_code: number; stdout: string; stderr: string };
  };

  it("bounds the workspace: a write past the size fails with ENOSPC inside the container; removal frees the disk", async () => {
    const image = typeof found === "string" ? "unused" : found.image;
    const key = "disk-key-0123456789";
    const sandboxId = `disk${randomBytes(6).toString("hex")}`;
    const handle = await runtime.start({
      sandboxId,
      spec: { id: image, command: [BUILTIN_AGENT_COMMAND], initialEnv: {}, workingDir: "/workspace" },
      sessionApiKey: key,
    });
    expect(await runtime.waitHealthy(handle, 30_000)).toBe(true);
    // The sandbox's user owns its workspace and can write to it.
    const small = await exec(handle, key, "echo hello > /workspace/small.txt && cat /workspace/small.txt");
    expect(small.stdout).toBe("hello\n");
    const write = `const fs=require("fs");const b=Buffer.alloc(1<<20);let n=0;try{for(;n<64;n++)fs.appendFileSync("/workspace/big",b)}catch(e){console.log(e.code,n);process.exit(1)}console.log("wrote",n)`;
    const big = await exec(handle, key, `node -e '${write}'`);
    expect(big.exit_code).toBe(1);
    const [code, mib] = big.stdout.trim().split(" ");
    expect(code).toBe("ENOSPC");
    expect(Number(mib)).toBeGreaterThan(16);
    expect(Number(mib)).toBeLessThan(33);
    const volume = String(handle.data.volume);
    expect(existsSync(join(dir, `${volume}.img`))).toBe(true);
    // Stopped, then its device detached (as after a reboot): it is not started again on whatever holds that device.
    await docker.getContainer(String(handle.data.containerId)).stop({ t: 1 });
    const device = (await docker.getVolume(volume).inspect()).Options?.device ?? "";
    expect(device).toMatch(/^\/dev\/loop\d+$/);
    spawnSync("losetup", ["-d", device]);
    await expect(runtime.resume(handle)).rejects.toThrow(/workspace disk is no longer attached/);
    await runtime.remove(handle);
    expect(readdirSync(dir)).toEqual([]);
    const attached = spawnSync("losetup", ["-j", join(dir, `${volume}.img`)], { encoding: "utf8" });
    expect(attached.stdout.trim()).toBe("");
  });
});

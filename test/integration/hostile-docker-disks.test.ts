import { randomBytes } from "node:crypto";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  createDockerRuntime,
  type DockerRuntime,
} from "../../src/adapters/runtimes/docker/docker-runtime.ts";
import { findExecutable } from "../../src/adapters/runtimes/process/bwrap.ts";
import { builtinImageSpec, dockerFromEnv, findDocker } from "../helpers/docker-env.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

// The host's loop devices run out while users start Docker sandboxes with SANDBOX_DISK_MB (many sandboxes, or
// another program holding them): `losetup --find` is wrapped to fail as it does then ("cannot find an unused loop
// device") while a flag file exists; exhausting the real devices would break every other program of the host.
// The start that meets it fails for its user alone, leaves nothing behind, and the next start once a device is free
// works. Skips, saying why, without Docker, the test image, root or loop devices.
const docker = dockerFromEnv();
const found = await findDocker(docker);
const dir = mkdtempSync(join(tmpdir(), "aws-hostile-disks-"));
const tools = join(dir, "tools");
const disks = join(dir, "disks");
const flag = join(dir, "no-loop-devices");
const SYSTEM = "/usr/sbin:/usr/bin:/sbin:/bin";
const mkfs = findExecutable("mkfs.ext4", SYSTEM);
const debugfs = findExecutable("debugfs", SYSTEM);
const losetup = findExecutable("losetup", SYSTEM);
if (mkfs && debugfs && losetup) {
  mkdirSync(tools);
  symlinkSync(mkfs, join(tools, "mkfs.ext4"));
  symlinkSync(debugfs, join(tools, "debugfs"));
  writeFileSync(
    join(tools, "losetup"),
    `#!/bin/sh\nif [ -e '${flag}' ] && [ "$1" = --find ]; then echo 'losetup: cannot find an unused loop device' >&2; exit 1; fi\nexec '${losetup}' "$@"\n`,
  );
  chmodSync(join(tools, "losetup"), 0o755);
}
const run = randomBytes(4).toString("hex");
const runtime: DockerRuntime = createDockerRuntime({
  docker,
  network: "host",
  labels: { "workspace.test-run": run },
  stopTimeoutSeconds: 1,
  diskBytes: 32 * 1024 * 1024,
  diskDir: disks,
  diskToolsPath: tools,
  warmContainers: 0,
});
const skip =
  typeof found === "string"
    ? found
    : runtime.workspaceLimit.startsWith("not limited") || !mkfs
      ? runtime.workspaceLimit
      : null;
if (skip) console.log(`hostile docker disk tests skipped: ${skip}`);
const image = typeof found === "string" ? "unused" : found.image;

describe.skipIf(skip !== null)("loop devices running out under SANDBOX_DISK_MB on Docker", () => {
  let t: TestApp | undefined;
  afterAll(async () => {
    await t?.close();
    await runtime.removeAll();
    rmSync(dir, { recursive: true, force: true });
  });

  const status = async (key: string, id: string) =>
    ((await call(t?.url ?? "", key, "GET", `/api/v1/sandboxes?id=${id}`)).body as { status: string }[])[0]
      ?.status;
  async function settled(key: string, id: string): Promise<string | undefined> {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const s = await status(key, id);
      if (s !== "STARTING" || Date.now() > deadline) return s;
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  it("fails that user's start only, leaves no image, volume or container behind, and the next start works", async () => {
    t = await startTestApp({
      runtime,
      sweepIntervalMs: 0,
      specs: [builtinImageSpec(image)],
    });
    const alice = await t.keyFor("alice");
    const bob = await t.keyFor("bob");
    const a = await call(t.url, alice, "POST", "/api/v1/sandboxes");
    expect(a.status).toBe(200);
    const aliceId = (a.body as { id: string }).id;
    expect(await settled(alice, aliceId)).toBe("RUNNING");
    const imagesBefore = readdirSync(disks).sort();

    writeFileSync(flag, "");
    const b = await call(t.url, bob, "POST", "/api/v1/sandboxes");
    expect(b.status).toBe(200);
    const bobId = (b.body as { id: string }).id;
    expect(await settled(bob, bobId)).toBe("ERROR");
    // Nothing of bob's start is left: no disk image, no volume, no container.
    expect(readdirSync(disks).sort()).toEqual(imagesBefore);
    const volumes = (await docker.listVolumes()).Volumes ?? [];
    expect(volumes.filter((v) => v.Name.includes(bobId))).toEqual([]);
    const containers = await docker.listContainers({
      all: true,
      filters: { label: [`workspace.test-run=${run}`] },
    });
    expect(containers.map((c) => c.Labels["workspace.sandbox.id"])).toEqual([aliceId]);
    // Alice's sandbox goes on.
    expect(await status(alice, aliceId)).toBe("RUNNING");

    rmSync(flag);
    expect((await call(t.url, bob, "DELETE", `/api/v1/sandboxes/${bobId}`)).status).toBe(200);
    const again = await call(t.url, bob, "POST", "/api/v1/sandboxes");
    expect(await settled(bob, (again.body as { id: string }).id)).toBe("RUNNING");
    expect(existsSync(flag)).toBe(false);
  }, 120_000);
});

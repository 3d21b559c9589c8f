// Gives the run its own TMPDIR (every test's temp folders, sandbox workspaces included, live below it) and, at the
// end, checks that no sandbox process, container or workspace mount outlived the suite: leftovers are killed, listed, and written
// to $WORKSPACE_LEFTOVER_REPORT so that scripts/test.ts counts them as a failure.
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { dockerFromEnv } from "./helpers/docker-env.ts";
import { unmountUnder } from "./helpers/mounts.ts";

export default function setup(): () => Promise<void> {
  const runDir = mkdtempSync(join(tmpdir(), "aws-run-"));
  process.env.TMPDIR = runDir;
  return async () => {
    const leftovers: string[] = [];
    for (const entry of readdirSync("/proc")) {
      if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
      try {
        const cwd = readlinkSync(`/proc/${entry}/cwd`);
        if (cwd.startsWith(runDir)) {
          let cmd = "";
          try {
            cmd = readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " ").trim().slice(0, 200);
          } catch {
            // gone meanwhile
          }
          leftovers.push(`process ${entry} (in ${cwd.slice(runDir.length) || "/"}: ${cmd})`);
          process.kill(Number(entry), "SIGKILL");
        }
      } catch {
        // gone or not ours
      }
    }
    try {
      const docker = dockerFromEnv();
      const containers = await Promise.race([
        docker.listContainers({ all: true, filters: { label: ["workspace.managed=true"] } }),
        new Promise<never[]>((r) => setTimeout(() => r([]), 3000)),
      ]);
      for (const c of containers) {
        leftovers.push(`container ${c.Names[0] ?? c.Id}`);
        await docker
          .getContainer(c.Id)
          .remove({ force: true })
          .catch(() => {});
      }
    } catch {
      // no Docker engine: nothing to check
    }
    // Loop-mounted workspaces of sandboxes nobody removed.
    for (const path of unmountUnder(runDir)) leftovers.push(`mount ${path}`);
    if (leftovers.length > 0)
      console.error(`LEFTOVERS after the suite (now removed): ${leftovers.join(", ")}`);
    else console.log("no sandbox process or container left behind");
    if (process.env.WORKSPACE_LEFTOVER_REPORT)
      writeFileSync(process.env.WORKSPACE_LEFTOVER_REPORT, JSON.stringify(leftovers));
    rmSync(runDir, { recursive: true, force: true });
  };
}

/**
 * What SandboxCgroups writes, on cgroup trees laid out like the kernel's (a folder per cgroup, interface files in
 * it) but made in a temporary folder and named by a mountinfo file of the test's own. This host mounts cgroup v1, so
 * the v2 path is checked here against the kernel's documented file names and formats (cgroup-v2.rst: cgroup.procs,
 * cgroup.subtree_control, pids.max, memory.max, memory.swap.max, cpu.max "$MAX $PERIOD", memory.events "oom_kill N");
 * the kernel's enforcement of v1 limits is tested on real cgroups in test/contract/runtime-process.test.ts.
 */
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { limitedArgv, SandboxCgroups } from "../../src/adapters/runtimes/process/sandbox-limits.ts";

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "cgroups-"));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

const limits = { pids: 512, memoryBytes: 2 * 1024 ** 3, cpus: 1.5 };

/** A mountinfo file naming `lines` ([mount point, fstype, super options]) as the kernel prints them. */
function mountinfo(lines: [string, string, string][]): string {
  const file = join(root, "mountinfo");
  writeFileSync(
    file,
    `${lines.map(([at, type, opts], i) => `${30 + i} 23 0:${28 + i} / ${at} rw,relatime - ${type} ${type} ${opts}`).join("\n")}\n`,
  );
  return file;
}

/** A cgroup v2 root with the given controllers available. */
function v2Root(controllers: string): string {
  const dir = join(root, "unified");
  mkdirSync(dir);
  writeFileSync(join(dir, "cgroup.controllers"), controllers);
  writeFileSync(join(dir, "cgroup.subtree_control"), "");
  return dir;
}

const read = (file: string): string => readFileSync(file, "utf8");

describe("SandboxCgroups on cgroup v2", () => {
  it("enables the controllers down the tree and writes each limit in v2's files and formats", () => {
    const unified = v2Root("cpuset cpu io memory hugetlb pids rdma misc");
    const cgroups = SandboxCgroups.open("/srv/workspaces", limits, mountinfo([[unified, "cgroup2", "rw"]]));
    if (typeof cgroups === "string") throw new Error(cgroups);
    expect(cgroups.version).toBe(2);
    expect(cgroups.controllers.sort()).toEqual(["cpu", "memory", "pids"]);
    const base = join(unified, readBase(unified));
    // Controllers reach a child only when every parent enables them for its subtree.
    expect(read(join(unified, "cgroup.subtree_control"))).toBe("+pids +memory +cpu");
    expect(read(join(base, "cgroup.subtree_control"))).toBe("+pids +memory +cpu");

    mkdirSync(join(base, "sb1"));
    writeFileSync(join(base, "sb1", "memory.swap.max"), "max");
    const procs = cgroups.create("sb1");
    // One hierarchy: one cgroup.procs to join for all three controllers.
    expect(procs).toEqual([join(base, "sb1", "cgroup.procs")]);
    expect(read(join(base, "sb1", "pids.max"))).toBe("512");
    expect(read(join(base, "sb1", "memory.max"))).toBe(String(2 * 1024 ** 3));
    expect(read(join(base, "sb1", "memory.swap.max"))).toBe("0");
    expect(read(join(base, "sb1", "cpu.max"))).toBe("150000 100000");

    writeFileSync(join(base, "sb1", "cgroup.procs"), "101\n102\n");
    expect(cgroups.pids("sb1").sort()).toEqual([101, 102]);
    writeFileSync(join(base, "sb1", "memory.events"), "low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n");
    expect(cgroups.oomKilled("sb1")).toBe(false);
    writeFileSync(join(base, "sb1", "memory.events"), "low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n");
    expect(cgroups.oomKilled("sb1")).toBe(true);
  });

  it("falls back to v1 when the unified hierarchy lacks a controller (a hybrid host)", () => {
    const unified = v2Root("");
    const pids = join(root, "pids");
    const memory = join(root, "memory");
    mkdirSync(pids);
    mkdirSync(memory);
    const cgroups = SandboxCgroups.open(
      "/srv/workspaces",
      { pids: 64, memoryBytes: 1024 ** 3 },
      mountinfo([
        [pids, "cgroup", "rw,pids"],
        [memory, "cgroup", "rw,memory"],
        [unified, "cgroup2", "rw"],
      ]),
    );
    if (typeof cgroups === "string") throw new Error(cgroups);
    expect(cgroups.version).toBe(1);
    const procs = cgroups.create("sb1");
    expect(procs).toHaveLength(2);
    const [pidsDir, memoryDir] = procs.map((p) => p.replace(/\/cgroup\.procs$/, ""));
    expect(pidsDir?.startsWith(pids)).toBe(true);
    expect(read(join(pidsDir as string, "pids.max"))).toBe("64");
    expect(read(join(memoryDir as string, "memory.limit_in_bytes"))).toBe(String(1024 ** 3));
    expect(
      existsSync(join(unified, "cgroup.subtree_control")) && read(join(unified, "cgroup.subtree_control")),
    ).toBe("");
  });

  it("says why when no cgroup can be used, so rlimits are the fallback", () => {
    expect(SandboxCgroups.open("/srv/w", limits, mountinfo([]))).toMatch(/no cgroup controller .*pids/);
    expect(SandboxCgroups.open("/srv/w", {}, mountinfo([]))).toBe("no limit asked");
  });

  it("removes the cgroups of workspaces that are gone and keeps the others", () => {
    const unified = v2Root("cpu memory pids");
    const cgroups = SandboxCgroups.open(
      "/srv/workspaces",
      { pids: 8 },
      mountinfo([[unified, "cgroup2", "rw"]]),
    );
    if (typeof cgroups === "string") throw new Error(cgroups);
    const base = join(unified, readBase(unified));
    for (const name of ["live", "gone"]) cgroups.create(name);
    // rmdir of a real cgroup ignores its interface files; a plain folder needs them gone first.
    for (const name of ["live", "gone"]) rmSync(join(base, name, "pids.max"));
    expect(cgroups.sweep((folder) => folder === "live")).toBe(1);
    expect(existsSync(join(base, "live"))).toBe(true);
    expect(existsSync(join(base, "gone"))).toBe(false);
  });
});

describe("limitedArgv", () => {
  it("joins every cgroup before the command, or applies rlimits through prlimit", () => {
    expect(limitedArgv(["bwrap", "x"], [], { nproc: 10, asBytes: 100 }, "/usr/bin/prlimit")).toEqual([
      "/usr/bin/prlimit",
      "--nproc=10",
      "--as=100",
      "--core=0",
      "--",
      "bwrap",
      "x",
    ]);
    // No core file either way (the agent's memory holds its keys), with nothing else to limit too.
    expect(limitedArgv(["bwrap"], [], null, "/usr/bin/prlimit")).toEqual([
      "/usr/bin/prlimit",
      "--core=0",
      "--",
      "bwrap",
    ]);
    const argv = limitedArgv(["bwrap"], ["/a/cgroup.procs", "/b/cgroup.procs"], null, null);
    expect(argv.slice(0, 2)).toEqual(["/bin/sh", "-c"]);
    expect(argv[2]).toMatch(/^ulimit -c 0; /);
    expect(argv.slice(3)).toEqual(["sh", "2", "/a/cgroup.procs", "/b/cgroup.procs", "bwrap"]);
  });
});

/** The one base folder open() made under a v2 root. */
function readBase(unified: string): string {
  const found = readdirSync(unified).filter((n) => n.startsWith("agent-workspace-"));
  expect(found).toHaveLength(1);
  return found[0] as string;
}

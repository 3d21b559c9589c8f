// A process sandbox's launch described without I/O (src/adapters/runtimes/process/launch-description.ts): its environment,
// command, bubblewrap layout, network prefix, stdin and handle, from the spec and what the launcher chose. The
// process runtime's contract suite and the isolation tests run the same launches for real.
import { describe, expect, it } from "vitest";
import {
  describeLaunch,
  type LaunchRequest,
  type LaunchSettings,
  launchedHandle,
  sandboxEnv,
} from "../../src/adapters/runtimes/process/launch-description.ts";
import type { RuntimeSpec } from "../../src/ports/sandbox-runtime.ts";

const NODE = "/opt/node/bin/node";

const settings = (over: Partial<LaunchSettings> = {}): LaunchSettings => ({
  host: "127.0.0.1",
  urlHost: "127.0.0.1",
  baseEnv: { PATH: "/usr/bin:/bin", LANG: "C.UTF-8" },
  compileCacheDir: "/root/ws/.cache",
  agentCommand: [NODE, "--flag", "/app/agent/main.ts"],
  agentBinary: "/root/ws/.node/node",
  agentFiles: ["/app/agent", "/app/package.json"],
  readOnlyPaths: [NODE, "/srv/tools"],
  asRoot: true,
  ...over,
});

const spec = (over: Partial<RuntimeSpec> = {}): RuntimeSpec => ({
  id: "default",
  command: [],
  initialEnv: {},
  workingDir: "",
  ...over,
});

const LEASE = { index: 3, name: "awsn3", hostIf: "awsh3", address: "10.213.0.14", gateway: "10.213.0.13" };
const NETWORK = {
  enter: (lease: { name: string }) => ["/usr/bin/nsenter", `--net=/run/netns/${lease.name}`, "--"],
  resolvConf: "/root/ws/.net/resolv.conf",
};
const USER = { uid: 1_000_000_007, gid: 1_000_000_007 };

const request = (over: Partial<LaunchRequest> = {}): LaunchRequest => ({
  workspace: "/root/ws/sb1",
  cwd: "/root/ws/sb1",
  spec: spec(),
  sessionApiKey: "sbx_sb1_key",
  port: 41000,
  listening: true,
  net: null,
  isolation: { user: USER },
  network: NETWORK,
  execPath: NODE,
  ...over,
});

describe("a process sandbox's environment", () => {
  it("on the host's network: base, HOME, the spec's, the key, PORT, HOST, WORKSPACE_DIR, LISTEN_FD, the compile cache", () => {
    const env = sandboxEnv(settings(), request({ spec: spec({ initialEnv: { A: "1", LANG: "de_DE" } }) }));
    expect(env).toStrictEqual({
      PATH: "/usr/bin:/bin",
      LANG: "de_DE",
      HOME: "/root/ws/sb1",
      A: "1",
      SESSION_API_KEY: "sbx_sb1_key",
      OH_SESSION_API_KEYS_0: "sbx_sb1_key",
      PORT: "41000",
      HOST: "127.0.0.1",
      WORKSPACE_DIR: "/root/ws/sb1",
      LISTEN_FD: "3",
      NODE_COMPILE_CACHE: "/root/ws/.cache",
    });
  });

  it("a warm agent (no key yet) takes its claim on stdin; no LISTEN_FD without an inherited socket", () => {
    const env = sandboxEnv(settings(), request({ sessionApiKey: null, listening: false }));
    expect(env.SANDBOX_AGENT_CLAIM).toBe("stdin");
    expect(env.SESSION_API_KEY).toBeUndefined();
    expect(env.OH_SESSION_API_KEYS_0).toBeUndefined();
    expect(env.LISTEN_FD).toBeUndefined();
  });

  it("in a network of its own: listens on every address, names its gateway, reaches a loopback webhook through it", () => {
    const env = sandboxEnv(
      settings(),
      request({
        net: LEASE,
        port: 8000,
        listening: false,
        spec: spec({ initialEnv: { OH_WEBHOOKS_0_BASE_URL: "http://127.0.0.1:3000/api/v1/webhooks" } }),
      }),
    );
    expect(env).toMatchObject({
      HOST: "0.0.0.0",
      PORT: "8000",
      SANDBOX_HOST_GATEWAY: "10.213.0.13",
      OH_WEBHOOKS_0_BASE_URL: "http://10.213.0.13:3000/api/v1/webhooks",
    });
    const shared = sandboxEnv(
      settings(),
      request({ spec: spec({ initialEnv: { OH_WEBHOOKS_0_BASE_URL: "http://127.0.0.1:3000/x" } }) }),
    );
    expect(shared.OH_WEBHOOKS_0_BASE_URL).toBe("http://127.0.0.1:3000/x");
    expect(shared.SANDBOX_HOST_GATEWAY).toBeUndefined();
  });

  it("the built-in agent loses NODE_OPTIONS that open an inspector; another command keeps them, without the compile cache", () => {
    const options = { NODE_OPTIONS: "--inspect=0.0.0.0:9229 --max-old-space-size=512 --inspect-port 9230" };
    const builtin = sandboxEnv(settings(), request({ spec: spec({ initialEnv: options }) }));
    expect(builtin.NODE_OPTIONS).toBe("--max-old-space-size=512");
    const only = sandboxEnv(
      settings(),
      request({ spec: spec({ initialEnv: { NODE_OPTIONS: "--inspect" } }) }),
    );
    expect("NODE_OPTIONS" in only).toBe(false);
    const other = sandboxEnv(
      settings(),
      request({ spec: spec({ command: ["node", "x.js"], initialEnv: options }) }),
    );
    expect(other.NODE_OPTIONS).toBe(options.NODE_OPTIONS);
    expect(other.NODE_COMPILE_CACHE).toBeUndefined();
  });
});

describe("a process sandbox's launch", () => {
  it("the built-in agent isolated as root: from the execute-only Node, its files, binary and cache read-only", () => {
    const d = describeLaunch(
      settings(),
      request({
        spec: spec({ command: ["@builtin/sandbox-agent", "--port={port}", "--host={host}"] }),
        isolation: { user: USER, tmpBytes: 1 << 20, shmBytes: 2 << 20 },
      }),
    );
    expect(d.command).toEqual([
      "/root/ws/.node/node",
      "--flag",
      "/app/agent/main.ts",
      "--port=41000",
      "--host=127.0.0.1",
    ]);
    expect(d.layout).toStrictEqual({
      workspace: "/root/ws/sb1",
      cwd: "/root/ws/sb1",
      readOnly: [
        NODE,
        "/srv/tools",
        "/app/agent",
        "/app/package.json",
        "/root/ws/.node/node",
        "/root/ws/.cache",
      ],
      user: USER,
      asRoot: true,
      tmpBytes: 1 << 20,
      shmBytes: 2 << 20,
    });
    expect(d.compileCache).toStrictEqual({ dir: "/root/ws/.cache", shared: true });
    expect(d.enter).toEqual([]);
  });

  it("runs the agent command as given when not root, not isolated, without a copy, or run by another Node", () => {
    const plain = [NODE, "--flag", "/app/agent/main.ts"];
    for (const [s, r] of [
      [settings({ asRoot: false }), request()],
      [settings(), request({ isolation: null })],
      [settings({ agentBinary: null }), request()],
      [settings(), request({ execPath: "/other/node" })],
    ] as const) {
      const d = describeLaunch(s, r);
      expect(d.command).toEqual(plain);
      expect(d.layout?.readOnly ?? []).not.toContain("/root/ws/.node/node");
    }
  });

  it("not isolated: no layout; the compile cache made but not shared", () => {
    const d = describeLaunch(settings(), request({ isolation: null }));
    expect(d.layout).toBeNull();
    expect(d.compileCache).toStrictEqual({ dir: "/root/ws/.cache", shared: false });
    expect(describeLaunch(settings({ compileCacheDir: null }), request()).compileCache).toBeNull();
    expect(describeLaunch(settings({ compileCacheDir: "" }), request()).compileCache).toBeNull();
  });

  it("a custom command: {port} and {host} replaced, only the runtime's read-only paths, no compile cache", () => {
    const d = describeLaunch(
      settings(),
      request({ spec: spec({ command: ["/bin/sh", "-c", "serve {host}:{port}"] }), listening: false }),
    );
    expect(d.command).toEqual(["/bin/sh", "-c", "serve 127.0.0.1:41000"]);
    expect(d.layout?.readOnly).toEqual([NODE, "/srv/tools"]);
    expect(d.compileCache).toBeNull();
    const netted = describeLaunch(
      settings(),
      request({ spec: spec({ command: ["/bin/sh", "-c", "serve {host}:{port}"] }), net: LEASE, port: 8000 }),
    );
    expect(netted.command).toEqual(["/bin/sh", "-c", "serve 0.0.0.0:8000"]);
  });

  it("in a network of its own: entered through nsenter first, the networks' resolv.conf bound", () => {
    const d = describeLaunch(settings(), request({ net: LEASE, port: 8000, listening: false }));
    expect(d.enter).toEqual(["/usr/bin/nsenter", "--net=/run/netns/awsn3", "--"]);
    expect(d.layout?.resolvConf).toBe("/root/ws/.net/resolv.conf");
    const noDns = describeLaunch(
      settings(),
      request({ net: LEASE, network: { ...NETWORK, resolvConf: null }, port: 8000 }),
    );
    expect(noDns.layout && "resolvConf" in noDns.layout).toBe(false);
    // No lease (the host's network): neither, whatever the runtime's networks.
    const host = describeLaunch(settings(), request());
    expect(host.enter).toEqual([]);
    expect(host.layout && "resolvConf" in host.layout).toBe(false);
  });

  it("stdin: the built-in agent's environment and key at once, none in its spawn environment", () => {
    const d = describeLaunch(
      settings(),
      request({ spec: spec({ workingDir: "sub" }), cwd: "/root/ws/sb1/sub" }),
    );
    expect(d.stdin).toBe("pipe");
    expect(d.claim).toBe(`${JSON.stringify({ env: d.env, cwd: "/root/ws/sb1/sub" })}\n`);
    expect(d.env.SESSION_API_KEY).toBe("sbx_sb1_key");
    expect(d.spawnEnv.SESSION_API_KEY).toBeUndefined();
    expect(d.spawnEnv.OH_SESSION_API_KEYS_0).toBeUndefined();
    expect(d.spawnEnv.SANDBOX_AGENT_CLAIM).toBe("now");
    expect(d.spawnEnv.PORT).toBe("41000");
  });

  it("stdin: a warm agent's claim comes later; another command gets none and its key in its environment", () => {
    const warm = describeLaunch(settings(), request({ sessionApiKey: null }));
    expect(warm).toMatchObject({ stdin: "pipe", claim: null });
    expect(warm.spawnEnv).toBe(warm.env);
    expect(warm.env.SANDBOX_AGENT_CLAIM).toBe("stdin");
    const other = describeLaunch(settings(), request({ spec: spec({ command: ["/bin/sh"] }) }));
    expect(other).toMatchObject({ stdin: "ignore", claim: null });
    expect(other.spawnEnv.SESSION_API_KEY).toBe("sbx_sb1_key");
  });
});

describe("a launched process sandbox's handle", () => {
  it("on the host's network: its agent at urlHost; isolated: bwrap and its uid", () => {
    const launched = {
      pid: 42,
      startTimeTicks: 7,
      port: 41000,
      workspace: "/root/ws/sb1",
      isolatedUid: 5,
      net: null,
    };
    expect(launchedHandle({ urlHost: "[::1]" }, launched)).toStrictEqual({
      data: {
        pid: 42,
        pgid: 42,
        port: 41000,
        workspace: "/root/ws/sb1",
        startTimeTicks: 7,
        isolation: "bwrap",
        uid: 5,
      },
      agentUrl: "http://[::1]:41000",
      port: 41000,
    });
    expect(launchedHandle({ urlHost: "127.0.0.1" }, { ...launched, isolatedUid: null }).data).toStrictEqual({
      pid: 42,
      pgid: 42,
      port: 41000,
      workspace: "/root/ws/sb1",
      startTimeTicks: 7,
    });
  });

  it("in a network of its own: its agent at its address, its gateway the host's", () => {
    const h = launchedHandle(
      { urlHost: "127.0.0.1" },
      { pid: 42, startTimeTicks: 7, port: 8000, workspace: "/w", isolatedUid: 5, net: LEASE },
    );
    expect(h.agentUrl).toBe("http://10.213.0.14:8000");
    expect(h.hostGateway).toBe("10.213.0.13");
    expect(h.data.net).toStrictEqual(LEASE);
  });
});

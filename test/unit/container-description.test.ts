// The Docker runtime's container description (src/adapters/runtimes/docker/container-description.ts), without Docker: the
// createContainer options and the handle made from a spec, the image's configuration, the ports chosen and the
// runtime's settings. The runtime-docker contract suite checks the same containers on a real engine.
import { describe, expect, it } from "vitest";
import {
  type ContainerRequest,
  containerFingerprint,
  containerPortNames,
  containerSettings,
  DEFAULT_MEMORY_BYTES,
  DEFAULT_PIDS_LIMIT,
  DEFAULT_SHM_BYTES,
  describeContainer,
  viaHostGateway,
} from "../../src/adapters/runtimes/docker/container-description.ts";
import type { RuntimeSpec } from "../../src/ports/sandbox-runtime.ts";

const PORTS = [
  { name: "AGENT_SERVER", port: 41000 },
  { name: "VSCODE", port: 41001 },
  { name: "WORKER_1", port: 41002 },
  { name: "WORKER_2", port: 41003 },
];

const spec = (over: Partial<RuntimeSpec> = {}): RuntimeSpec => ({
  id: "example/agent:1",
  command: [],
  initialEnv: {},
  workingDir: "/workspace/project",
  ...over,
});

const request = (over: Partial<ContainerRequest> = {}): ContainerRequest => ({
  sandboxId: "sb1",
  spec: spec(),
  sessionApiKey: "sbx_key",
  containerName: "oh-agent-server-sb1",
  labels: {},
  image: { User: "app", Cmd: ["/usr/local/bin/agent", "--serve"] },
  ports: PORTS,
  ...over,
});

/** The container's environment as a record. */
const envOf = (env: string[] | undefined): Record<string, string> =>
  Object.fromEntries((env ?? []).map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));

describe("container description", () => {
  it("on a bridge: the fixed container ports published on 127.0.0.1, the host gateway mapped and named", () => {
    const d = describeContainer(
      containerSettings({}),
      request({
        spec: spec({
          initialEnv: { OH_WEBHOOKS_0_BASE_URL: "http://127.0.0.1:3000/api/v1/webhooks", A: "1" },
        }),
      }),
    );
    expect(containerPortNames("bridge")).toEqual(["AGENT_SERVER", "VSCODE", "WORKER_1", "WORKER_2"]);
    expect(d.handle).toStrictEqual({
      data: {
        containerId: "",
        containerName: "oh-agent-server-sb1",
        volume: "openhands-workspace-sb1",
        network: "bridge",
        reachable: true,
      },
      agentUrl: "http://127.0.0.1:41000",
      port: 41000,
      hostGateway: "host.docker.internal",
      exposedPorts: PORTS.slice(1),
      workingDir: "/workspace/project",
    });
    expect(d.create.Env).toEqual([
      "OH_WEBHOOKS_0_BASE_URL=http://host.docker.internal:3000/api/v1/webhooks",
      "A=1",
      "OH_SESSION_API_KEYS_0=sbx_key",
      "SESSION_API_KEY=sbx_key",
      "PORT=8000",
      "HOST=0.0.0.0",
      "WORKSPACE_DIR=/workspace/project",
      "AGENT_SERVER=41000",
      "VSCODE=41001",
      "WORKER_1=41002",
      "WORKER_2=41003",
      "OH_VSCODE_PORT=8001",
      "SANDBOX_HOST_GATEWAY=host.docker.internal",
    ]);
    expect(d.create.ExposedPorts).toStrictEqual({
      "8000/tcp": {},
      "8001/tcp": {},
      "8011/tcp": {},
      "8012/tcp": {},
    });
    expect(d.create.HostConfig?.PortBindings).toStrictEqual({
      "8000/tcp": [{ HostIp: "127.0.0.1", HostPort: "41000" }],
      "8001/tcp": [{ HostIp: "127.0.0.1", HostPort: "41001" }],
      "8011/tcp": [{ HostIp: "127.0.0.1", HostPort: "41002" }],
      "8012/tcp": [{ HostIp: "127.0.0.1", HostPort: "41003" }],
    });
    expect(d.create.HostConfig?.ExtraHosts).toEqual(["host.docker.internal:host-gateway"]);
    expect(d.create.HostConfig?.NetworkMode).toBe("bridge");
    // The image's default command: none given.
    expect(d.create.Cmd).toBeUndefined();
  });

  it("on a bridge with another agent port: the agent's port inside is that one", () => {
    const d = describeContainer(containerSettings({ network: "sandboxes", agentPort: 9000 }), request());
    expect(envOf(d.create.Env).PORT).toBe("9000");
    expect(Object.keys(d.create.ExposedPorts ?? {})).toEqual([
      "9000/tcp",
      "8001/tcp",
      "8011/tcp",
      "8012/tcp",
    ]);
    expect(d.create.HostConfig?.NetworkMode).toBe("sandboxes");
  });

  it("on the host's network: the agent and VS Code listen on the chosen loopback ports; nothing published or rewritten", () => {
    const d = describeContainer(
      containerSettings({ network: "host" }),
      request({ spec: spec({ initialEnv: { OH_WEBHOOKS_0_BASE_URL: "http://127.0.0.1:3000/hook" } }) }),
    );
    const env = envOf(d.create.Env);
    expect(env).toMatchObject({
      PORT: "41000",
      HOST: "127.0.0.1",
      OH_VSCODE_PORT: "41001",
      OH_WEBHOOKS_0_BASE_URL: "http://127.0.0.1:3000/hook",
    });
    expect(env.SANDBOX_HOST_GATEWAY).toBeUndefined();
    expect(d.handle.hostGateway).toBeUndefined();
    expect(d.handle.agentUrl).toBe("http://127.0.0.1:41000");
    expect(d.create.ExposedPorts).toBeUndefined();
    expect(d.create.HostConfig?.PortBindings).toBeUndefined();
    expect(d.create.HostConfig?.ExtraHosts).toBeUndefined();
  });

  it("on network none: no ports (handle port 0, unreachable), loopback HOST, no gateway; the webhook still rewritten", () => {
    expect(containerPortNames("none")).toEqual([]);
    const d = describeContainer(
      containerSettings({ network: "none" }),
      request({
        ports: [],
        spec: spec({ initialEnv: { OH_WEBHOOKS_0_BASE_URL: "http://localhost:3000/h" } }),
      }),
    );
    expect(d.handle).toStrictEqual({
      data: {
        containerId: "",
        containerName: "oh-agent-server-sb1",
        volume: "openhands-workspace-sb1",
        network: "none",
        reachable: false,
      },
      agentUrl: "http://127.0.0.1:0",
      port: 0,
    });
    const env = envOf(d.create.Env);
    expect(env).toMatchObject({ PORT: "8000", HOST: "127.0.0.1" });
    expect(env.OH_VSCODE_PORT).toBeUndefined();
    expect(env.SANDBOX_HOST_GATEWAY).toBeUndefined();
    expect(env.OH_WEBHOOKS_0_BASE_URL).toBe("http://host.docker.internal:3000/h");
    expect(d.create.ExposedPorts).toBeUndefined();
    expect(d.create.HostConfig?.ExtraHosts).toBeUndefined();
  });

  it("a custom command has {port} and {host} replaced by the agent's port and listening address", () => {
    const command = ["sh", "-c", "serve --listen {host}:{port} --again {port}"];
    const bridge = describeContainer(containerSettings({}), request({ spec: spec({ command }) }));
    expect(bridge.create.Cmd).toEqual(["sh", "-c", "serve --listen 0.0.0.0:8000 --again 8000"]);
    const host = describeContainer(
      containerSettings({ network: "host" }),
      request({ spec: spec({ command }) }),
    );
    expect(host.create.Cmd).toEqual(["sh", "-c", "serve --listen 127.0.0.1:41000 --again 41000"]);
  });

  it("the built-in marker runs the image's command: alone, none given; with arguments, the image's plus those", () => {
    const alone = describeContainer(
      containerSettings({}),
      request({ spec: spec({ command: ["@builtin/sandbox-agent"] }) }),
    );
    expect(alone.create.Cmd).toBeUndefined();
    const extra = describeContainer(
      containerSettings({}),
      request({
        spec: spec({ command: ["@builtin/sandbox-agent", "--port", "{port}", "--host", "{host}"] }),
      }),
    );
    expect(extra.create.Cmd).toEqual([
      "/usr/local/bin/agent",
      "--serve",
      "--port",
      "8000",
      "--host",
      "0.0.0.0",
    ]);
    const noImageCmd = describeContainer(
      containerSettings({}),
      request({
        image: { User: "app", Cmd: null },
        spec: spec({ command: ["@builtin/sandbox-agent", "-v"] }),
      }),
    );
    expect(noImageCmd.create.Cmd).toEqual(["-v"]);
  });

  it("runs as the image's user; an image that runs as root (or has no user) as 1000:1000, owning its folders", () => {
    const own = describeContainer(containerSettings({}), request({ image: { User: "app" } }));
    expect(own.user).toBe("app");
    expect(own.create.User).toBe("app");
    expect(own.owned).toBeNull();
    for (const User of [undefined, "", " ", "root", "0", "0:0", "root:root"]) {
      const d = describeContainer(
        containerSettings({}),
        request({
          image: User === undefined ? {} : { User },
          spec: spec({
            initialEnv: { OH_CONVERSATIONS_PATH: "/state/conversations", OH_BASH_EVENTS_DIR: "rel" },
          }),
        }),
      );
      expect(d.create.User, String(User)).toBe("1000:1000");
      expect(d.owned, String(User)).toStrictEqual({
        folders: ["/workspace", "/workspace/project", "/state/conversations"],
        owner: { uid: 1000, gid: 1000 },
      });
    }
  });

  it("a configured user wins over the image's: numeric ones own the folders, named ones cannot be given them", () => {
    const numeric = describeContainer(
      containerSettings({ user: "2000" }),
      request({ spec: spec({ workingDir: "/w" }) }),
    );
    expect(numeric.create.User).toBe("2000");
    expect(numeric.owned).toStrictEqual({ folders: ["/w"], owner: { uid: 2000, gid: 2000 } });
    const pair = describeContainer(
      containerSettings({ user: "2000:3000" }),
      request({ spec: spec({ workingDir: "" }) }),
    );
    expect(pair.create.WorkingDir).toBe("/workspace");
    expect(pair.owned).toStrictEqual({ folders: ["/workspace"], owner: { uid: 2000, gid: 3000 } });
    const named = describeContainer(containerSettings({ user: "sandbox" }), request());
    expect(named.create.User).toBe("sandbox");
    expect(named.owned).toBeNull();
  });

  it("mounts the workspace volume and the read-only paths, nothing else; confined and limited", () => {
    const d = describeContainer(containerSettings({ readOnlyPaths: ["/srv/repos", "/opt/more"] }), request());
    expect(d.volume).toBe("openhands-workspace-sb1");
    expect(d.create.HostConfig).toMatchObject({
      Init: true,
      Mounts: [
        { Type: "volume", Source: "openhands-workspace-sb1", Target: "/workspace/project" },
        { Type: "bind", Source: "/srv/repos", Target: "/srv/repos", ReadOnly: true },
        { Type: "bind", Source: "/opt/more", Target: "/opt/more", ReadOnly: true },
      ],
      Privileged: false,
      CapDrop: ["ALL"],
      SecurityOpt: ["no-new-privileges"],
      Memory: DEFAULT_MEMORY_BYTES,
      PidsLimit: DEFAULT_PIDS_LIMIT,
      ShmSize: DEFAULT_SHM_BYTES,
      LogConfig: { Type: "json-file", Config: { "max-size": "10m", "max-file": "2" } },
    });
    expect(d.create.HostConfig?.NanoCpus).toBeUndefined();
    expect(d.create.HostConfig?.Binds).toBeUndefined();
    const limited = describeContainer(
      containerSettings({
        memoryBytes: 1 << 30,
        pidsLimit: 64,
        shmBytes: 1 << 20,
        nanoCpus: 2e9,
        init: false,
      }),
      request(),
    );
    expect(limited.create.HostConfig).toMatchObject({
      Init: false,
      Memory: 1 << 30,
      PidsLimit: 64,
      ShmSize: 1 << 20,
      NanoCpus: 2e9,
    });
  });

  it("labels the container and its volume: the runtime's, the caller's, and the handle's JSON", () => {
    const d = describeContainer(
      containerSettings({ labelPrefix: "x.", labels: { "test.run": "r1" }, volumePrefix: "vol-" }),
      request({ labels: { "x.warm": "true" } }),
    );
    expect(d.labels).toStrictEqual({
      "test.run": "r1",
      "x.warm": "true",
      "x.managed": "true",
      "x.sandbox.id": "sb1",
      "x.volume": "vol-sb1",
      "x.handle": JSON.stringify(d.handle),
    });
    expect(d.create.Labels).toBe(d.labels);
    expect(JSON.parse(d.labels["x.handle"] as string)).toStrictEqual(d.handle);
    expect(d.create).toMatchObject({ name: "oh-agent-server-sb1", Image: "example/agent:1" });
  });

  it("the fingerprint of the settings keeps the form warm containers on an engine carry", () => {
    expect(containerFingerprint(containerSettings({}))).toBe(
      JSON.stringify([
        "bridge",
        null,
        4294967296,
        2048,
        null,
        536870912,
        true,
        8000,
        "openhands-workspace-",
        [],
      ]),
    );
    expect(
      containerFingerprint(
        containerSettings({
          network: "host",
          user: "2000",
          nanoCpus: 1e9,
          readOnlyPaths: ["/r"],
          init: false,
        }),
      ),
    ).toBe(
      JSON.stringify([
        "host",
        "2000",
        4294967296,
        2048,
        1e9,
        536870912,
        false,
        8000,
        "openhands-workspace-",
        ["/r"],
      ]),
    );
  });

  it("rewrites only loopback URLs to the host gateway", () => {
    expect(viaHostGateway("http://localhost:3000/a")).toBe("http://host.docker.internal:3000/a");
    expect(viaHostGateway("https://127.1.2.3/a")).toBe("https://host.docker.internal/a");
    expect(viaHostGateway("http://[::1]:80")).toBe("http://host.docker.internal:80");
    expect(viaHostGateway("http://localhost.example.com/a")).toBe("http://localhost.example.com/a");
    expect(viaHostGateway("http://10.0.0.1:3000/a")).toBe("http://10.0.0.1:3000/a");
  });
});

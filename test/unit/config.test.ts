import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/server/config.ts";
import { ConfigError } from "../../src/server/config-types.ts";
import { ENV_DOC } from "../../src/server/env-doc.ts";
import { loadOrCreateKeyFile } from "../../src/server/key-file.ts";
import { defaultSpecs, loadSpecsFile } from "../../src/server/sandbox-specs.ts";

const dir = mkdtempSync(join(tmpdir(), "aws-config-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("loadConfig", () => {
  it("reports every invalid value at once; PORT and GRPC_PORT must differ", () => {
    let error: unknown;
    try {
      loadConfig(
        { PORT: "3005", GRPC_PORT: "3005", LOG_LEVEL: "loud", MAX_STREAMS: "0", AUTH_MODE: "nope" },
        "/srv",
      );
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const problems = (error as ConfigError).problems;
    expect(problems).toHaveLength(4);
    expect(problems[0]).toMatch(/^LOG_LEVEL "loud" is not a level/);
    expect(problems).toContain(
      "PORT and GRPC_PORT must differ (both are 3005): HTTP and gRPC each need a port of their own",
    );
    expect(problems.some((p) => p.startsWith("MAX_STREAMS must be an integer 1-1000000"))).toBe(true);
    expect(problems.some((p) => p.includes("AUTH_MODE"))).toBe(true);
    expect((error as ConfigError).message.split("\n")).toEqual(problems);
    // Port 0 (any free port) twice is two different ports.
    expect(loadConfig({ PORT: "0", GRPC_PORT: "0" }, "/srv").port).toBe(0);
  });

  it("LOCAL_REPOSITORY_ROOTS: absolute folders, normalized; relative entries refused", () => {
    expect(loadConfig({}, "/srv").localRepositoryRoots).toEqual([]);
    expect(
      loadConfig({ LOCAL_REPOSITORY_ROOTS: " /srv/repos/ , /mirrors/../mirrors,," }, "/srv")
        .localRepositoryRoots,
    ).toEqual(["/srv/repos", "/mirrors"]);
    expect(() => loadConfig({ LOCAL_REPOSITORY_ROOTS: "/ok,repos" }, "/srv")).toThrow(
      "LOCAL_REPOSITORY_ROOTS must list absolute folders, comma-separated; not absolute: repos",
    );
  });

  it("defaults: SQLite under ./data, ports 3000/3001, loopback, process runtime, verification on", () => {
    const c = loadConfig({}, "/srv");
    expect(c).toMatchObject({
      host: "127.0.0.1",
      port: 3000,
      grpcPort: 3001,
      dataDir: "/srv/data",
      storage: { kind: "sqlite", path: "/srv/data/workspace.sqlite" },
      runtime: { kind: "process" },
      gitProviderVerify: true,
      gitProviderAllowedHosts: [],
      gitRepositoryCacheSeconds: 60,
      maxRunningSandboxes: 5,
      maxSandboxesPerUser: 20,
      sweepIntervalMs: 30_000,
      encryptionKeyFile: "/srv/data/secret.key",
    });
    expect(Object.isFrozen(c)).toBe(true);
  });

  it("git provider hosts and repository cache", () => {
    const c = loadConfig(
      { GIT_PROVIDER_ALLOWED_HOSTS: " git.corp:8443, http://10.0.0.5 ,", GIT_REPOSITORY_CACHE_SECONDS: "0" },
      "/srv",
    );
    expect(c.gitProviderAllowedHosts).toEqual(["git.corp:8443", "http://10.0.0.5"]);
    expect(c.gitRepositoryCacheSeconds).toBe(0);
  });

  it("transport limits: defaults, overrides from the environment, and clear errors", () => {
    expect(loadConfig({}, "/srv").limits).toEqual({
      maxMessageBytes: 1048576,
      maxStreamsPerKey: 16,
      maxStreams: 1000,
      maxConnections: 10000,
      requestTimeoutMs: 30000,
      headersTimeoutMs: 10000,
      keyRecheckMs: 5000,
      maxWebhookBytes: 32 * 1024 * 1024,
    });
    const c = loadConfig(
      {
        WEBHOOK_MAX_BODY_BYTES: "2097152",
        MAX_MESSAGE_BYTES: "2048",
        MAX_STREAMS_PER_KEY: "2",
        MAX_STREAMS: "5",
        MAX_CONNECTIONS: "7",
        REQUEST_TIMEOUT_MS: "1500",
        HEADERS_TIMEOUT_MS: "700",
      },
      "/srv",
    );
    expect(c.limits).toMatchObject({
      maxMessageBytes: 2048,
      maxStreamsPerKey: 2,
      maxStreams: 5,
      maxConnections: 7,
      requestTimeoutMs: 1500,
      headersTimeoutMs: 700,
      maxWebhookBytes: 2 * 1024 * 1024,
    });
    expect(Object.isFrozen(c.limits)).toBe(true);
    expect(() => loadConfig({ WEBHOOK_MAX_BODY_BYTES: "1000" }, "/srv")).toThrow(
      /WEBHOOK_MAX_BODY_BYTES must be/,
    );
    expect(() => loadConfig({ MAX_MESSAGE_BYTES: "1MiB" }, "/srv")).toThrow(
      /MAX_MESSAGE_BYTES must be an integer/,
    );
    expect(() => loadConfig({ MAX_STREAMS_PER_KEY: "0" }, "/srv")).toThrow(ConfigError);
  });

  it("ADMIN_PORT, ADMIN_HOST and METRICS_TOKEN: off by default, parsed and checked", () => {
    expect(loadConfig({}, "/srv").admin).toEqual({
      port: undefined,
      host: "127.0.0.1",
      metricsToken: undefined,
    });
    expect(
      loadConfig({ ADMIN_PORT: "9100", ADMIN_HOST: "10.0.0.2", METRICS_TOKEN: "0123456789abcdef" }, "/srv")
        .admin,
    ).toEqual({ port: 9100, host: "10.0.0.2", metricsToken: "0123456789abcdef" });
    expect(() => loadConfig({ ADMIN_PORT: "99999" }, "/srv")).toThrow(/ADMIN_PORT must be a port/);
    expect(() => loadConfig({ METRICS_TOKEN: "short" }, "/srv")).toThrow(/METRICS_TOKEN must be at least 16/);
  });

  it("MAX_SANDBOXES_PER_USER and SWEEP_INTERVAL_MS are parsed and bounded", () => {
    expect(loadConfig({ MAX_SANDBOXES_PER_USER: "3", SWEEP_INTERVAL_MS: "0" }, "/srv")).toMatchObject({
      maxSandboxesPerUser: 3,
      sweepIntervalMs: 0,
    });
    expect(() => loadConfig({ MAX_SANDBOXES_PER_USER: "0" }, "/srv")).toThrow(ConfigError);
    expect(() => loadConfig({ SWEEP_INTERVAL_MS: "-1" }, "/srv")).toThrow(/SWEEP_INTERVAL_MS/);
  });

  it("sandbox confinement defaults: isolation auto, uids from 1e9; docker: the image's user, 2048 pids, 4096 MiB, a bridge", () => {
    const c = loadConfig({ SANDBOX_RUNTIME: "docker", HOST: "0.0.0.0" }, "/srv");
    expect(c.sandboxIsolation).toBe("auto");
    expect(c.sandboxUidBase).toBe(1_000_000_000);
    expect(c.sandboxWarmAgents).toBe(2);
    expect(loadConfig({ SANDBOX_WARM_AGENTS: "0" }, "/srv").sandboxWarmAgents).toBe(0);
    expect(c.runtime).toMatchObject({
      user: undefined,
      network: "bridge",
      pidsLimit: 2048,
      memoryBytes: 4096 * 1024 * 1024,
      warmContainers: 1,
    });
    expect(
      loadConfig({ SANDBOX_RUNTIME: "docker", HOST: "0.0.0.0", SANDBOX_WARM_CONTAINERS: "0" }, "/srv")
        .runtime,
    ).toMatchObject({ warmContainers: 0 });
    const set = loadConfig(
      {
        SANDBOX_ISOLATION: "none",
        SANDBOX_UID_BASE: "300000",
        SANDBOX_RUNTIME: "docker",
        DOCKER_NETWORK: "host",
        SANDBOX_DOCKER_USER: "4242",
      },
      "/srv",
    );
    expect(set).toMatchObject({
      sandboxIsolation: "none",
      sandboxUidBase: 300_000,
      runtime: { user: "4242" },
    });
  });

  it("sandbox limits apply to both runtimes: pids, memory, CPUs, /tmp, /dev/shm, workspace size and reserve, SANDBOX_ROOT", () => {
    const MB = 1024 * 1024;
    const c = loadConfig({}, "/srv");
    expect(c.sandboxLimits).toEqual({
      pids: 2048,
      memoryBytes: 4096 * MB,
      cpus: undefined,
      tmpBytes: 512 * MB,
      shmBytes: 512 * MB,
      nice: 10,
      diskBytes: 10_240 * MB,
      diskReserveBytes: 1024 * MB,
    });
    expect(c.sandboxRoot).toBe("/srv/data/sandboxes");
    expect(Object.isFrozen(c.sandboxLimits)).toBe(true);
    const set = loadConfig(
      {
        DATA_DIR: "/d",
        SANDBOX_PIDS_LIMIT: "64",
        SANDBOX_MEMORY_MB: "256",
        SANDBOX_CPUS: "0.5",
        SANDBOX_TMP_MB: "16",
        SANDBOX_SHM_MB: "8",
        SANDBOX_NICE: "0",
        SANDBOX_DISK_MB: "0",
        SANDBOX_DISK_RESERVE_MB: "100",
        SANDBOX_ROOT: "ws",
      },
      "/srv",
    );
    expect(set.sandboxLimits).toEqual({
      pids: 64,
      memoryBytes: 256 * MB,
      cpus: 0.5,
      tmpBytes: 16 * MB,
      shmBytes: 8 * MB,
      nice: 0,
      diskBytes: 0,
      diskReserveBytes: 100 * MB,
    });
    expect(set.sandboxRoot).toBe("/srv/ws");
    expect(() => loadConfig({ SANDBOX_TMP_MB: "0" }, "/srv")).toThrow(/SANDBOX_TMP_MB/);
    expect(() => loadConfig({ SANDBOX_DISK_MB: "-1" }, "/srv")).toThrow(/SANDBOX_DISK_MB/);
    expect(() => loadConfig({ SANDBOX_PIDS_LIMIT: "3" }, "/srv")).toThrow(/SANDBOX_PIDS_LIMIT/);
  });

  it("MONGODB_URI selects MongoDB; docker runtime options are parsed", () => {
    const c = loadConfig(
      {
        MONGODB_URI: "mongodb://db:27017/x",
        SANDBOX_RUNTIME: "docker",
        SANDBOX_MEMORY_MB: "512",
        SANDBOX_CPUS: "1.5",
        DOCKER_HOST: "unix:///run/d.sock",
        DOCKER_NETWORK: "host",
      },
      "/srv",
    );
    expect(c.storage).toEqual({ kind: "mongo", uri: "mongodb://db:27017/x", dbName: undefined });
    expect(c.runtime).toMatchObject({
      kind: "docker",
      socketPath: "/run/d.sock",
      network: "host",
      memoryBytes: 512 * 1024 * 1024,
      nanoCpus: 1.5e9,
    });
  });

  it.each([
    [{ PORT: "abc" }, "PORT must be a port number"],
    [{ GRPC_PORT: "70000" }, "GRPC_PORT must be a port number"],
    [{ MONGODB_URI: "postgres://x" }, "MONGODB_URI must start with mongodb://"],
    [{ SANDBOX_RUNTIME: "vm" }, "SANDBOX_RUNTIME must be process or docker"],
    [
      { SANDBOX_RUNTIME: "docker" },
      "DOCKER_NETWORK=bridge: sandbox containers reach this service at the host gateway",
    ],
    [
      { SANDBOX_RUNTIME: "docker", DOCKER_NETWORK: "mynet", HOST: "localhost" },
      "Set HOST=0.0.0.0 (or the gateway's address), or WEBHOOK_BASE_URL",
    ],
    [{ GIT_PROVIDER_VERIFY: "maybe" }, "GIT_PROVIDER_VERIFY must be true or false"],
    [{ ENCRYPTION_KEY: "short" }, "ENCRYPTION_KEY must be 32 bytes"],
    [{ SESSION_API_KEY: "abc" }, "SESSION_API_KEY must be at least 8 characters"],
    [{ MAX_RUNNING_SANDBOXES: "0" }, "MAX_RUNNING_SANDBOXES must be an integer"],
    [{ LOG_LEVEL: "loud" }, "LOG_LEVEL"],
    [{ GIT_PROVIDER_ALLOWED_HOSTS: "git.corp, http://x/path" }, "GIT_PROVIDER_ALLOWED_HOSTS must list"],
    [{ GIT_REPOSITORY_CACHE_SECONDS: "-1" }, "GIT_REPOSITORY_CACHE_SECONDS must be an integer"],
    [{ SANDBOX_ISOLATION: "chroot" }, "SANDBOX_ISOLATION must be auto, bwrap or none"],
    [{ SANDBOX_UID_BASE: "0" }, "SANDBOX_UID_BASE must be an integer"],
    [{ SANDBOX_WARM_AGENTS: "65" }, "SANDBOX_WARM_AGENTS must be an integer"],
    [{ SANDBOX_WARM_AGENTS: "-1" }, "SANDBOX_WARM_AGENTS must be an integer"],
    [{ SANDBOX_WARM_CLAIMS_PER_MINUTE: "-1" }, "SANDBOX_WARM_CLAIMS_PER_MINUTE must be an integer"],
    [{ SANDBOX_WARM_CLAIMS_PER_MINUTE: "six" }, "SANDBOX_WARM_CLAIMS_PER_MINUTE must be an integer"],
    [
      { SANDBOX_RUNTIME: "docker", SANDBOX_WARM_CONTAINERS: "65" },
      "SANDBOX_WARM_CONTAINERS must be an integer",
    ],
    [
      { SANDBOX_RUNTIME: "docker", SANDBOX_WARM_CONTAINERS: "two" },
      "SANDBOX_WARM_CONTAINERS must be an integer",
    ],
    [{ SANDBOX_RUNTIME: "docker", SANDBOX_DOCKER_USER: "0:0" }, "SANDBOX_DOCKER_USER must be a non-root uid"],
    [
      { SANDBOX_RUNTIME: "docker", SANDBOX_DOCKER_USER: "root" },
      "SANDBOX_DOCKER_USER must be a non-root uid",
    ],
    [
      { SANDBOX_RUNTIME: "docker", DOCKER_NETWORK: "host", SANDBOX_PIDS_LIMIT: "5" },
      "SANDBOX_PIDS_LIMIT must be an integer",
    ],
  ])("rejects %o with a clear message", (env, message) => {
    expect(() => loadConfig(env as Record<string, string>, "/srv")).toThrow(ConfigError);
    expect(() => loadConfig(env as Record<string, string>, "/srv")).toThrow(message);
  });

  it("accepts a 32-byte key as hex or base64", () => {
    expect(loadConfig({ ENCRYPTION_KEY: "ab".repeat(32) }).encryptionKey?.length).toBe(32);
    expect(loadConfig({ ENCRYPTION_KEY: Buffer.alloc(32, 7).toString("base64") }).encryptionKey?.length).toBe(
      32,
    );
  });
});

describe("key file", () => {
  it("is created once with mode 0600 and read back; a group-readable file is refused", () => {
    const path = join(dir, "k", "secret.key");
    const first = loadOrCreateKeyFile(path);
    expect(first.created).toBe(true);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    const again = loadOrCreateKeyFile(path);
    expect(again.created).toBe(false);
    expect(again.key.equals(first.key)).toBe(true);
    chmodSync(path, 0o640);
    expect(() => loadOrCreateKeyFile(path)).toThrow(/owner only/);
  });
});

describe("sandbox specs", () => {
  it("defaults per runtime: the built-in agent for process, the agent-server image for docker", () => {
    const now = new Date();
    expect(defaultSpecs({ kind: "process" }, now)[0]?.id).toBe("workspace-agent");
    const docker = defaultSpecs(loadConfig({ SANDBOX_RUNTIME: "docker", HOST: "0.0.0.0" }).runtime, now)[0];
    expect(docker?.id).toBe("ghcr.io/openhands/agent-server:5f62cee-python");
    expect(docker?.command).toEqual(["--host", "{host}", "--port", "{port}"]);
  });

  it("retention of the change log and of finished start tasks: defaults, overrides, bounds", () => {
    expect(loadConfig({}, "/srv").retention).toEqual({
      changeLogMs: 3_600_000,
      changeLogMaxEntries: 10_000,
      startTaskMs: 86_400_000,
    });
    const c = loadConfig(
      { CHANGE_LOG_RETENTION_MS: "60000", CHANGE_LOG_MAX_ENTRIES: "500", START_TASK_RETENTION_MS: "600000" },
      "/srv",
    );
    expect(c.retention).toEqual({ changeLogMs: 60_000, changeLogMaxEntries: 500, startTaskMs: 600_000 });
    expect(Object.isFrozen(c.retention)).toBe(true);
    expect(() => loadConfig({ CHANGE_LOG_MAX_ENTRIES: "10" }, "/srv")).toThrow(ConfigError);
    expect(() => loadConfig({ START_TASK_RETENTION_MS: "-1" }, "/srv")).toThrow(ConfigError);
  });

  it("reads a spec file and rejects bad ones naming the problem", () => {
    const good = join(dir, "specs.json");
    writeFileSync(
      good,
      JSON.stringify([{ id: "a", command: ["x"], initial_env: { K: "v" }, working_dir: "/w" }, { id: "b" }]),
    );
    const specs = loadSpecsFile(good, new Date());
    expect(specs.map((s) => s.id)).toEqual(["a", "b"]);
    expect(specs[0]).toMatchObject({ command: ["x"], initialEnv: { K: "v" }, workingDir: "/w" });
    for (const [content, message] of [
      ["not json", "SANDBOX_SPECS_FILE"],
      ["[]", "non-empty JSON array"],
      ['[{"id":""}]', "id must be a non-empty string"],
      ['[{"id":"a"},{"id":"a"}]', "duplicate id a"],
      ['[{"id":"a","command":"ls"}]', "command must be an array of strings"],
      ['[{"id":"a","initial_env":{"K":1}}]', "initial_env must map names to strings"],
    ] as const) {
      const p = join(dir, "bad.json");
      writeFileSync(p, content);
      expect(() => loadSpecsFile(p, new Date())).toThrow(message);
    }
  });
});

describe("SANDBOX_WARM_CLAIMS_PER_MINUTE", () => {
  it("defaults to 6; 0 turns the limit off", () => {
    expect(loadConfig({}, "/srv").warmClaimsPerMinute).toBe(6);
    expect(loadConfig({ SANDBOX_WARM_CLAIMS_PER_MINUTE: "0" }, "/srv").warmClaimsPerMinute).toBe(0);
  });
});

describe("TLS_CERT_FILE, TLS_KEY_FILE and WEBHOOK_PORT", () => {
  const opensslMissing = spawnSync("openssl", ["version"]).error !== undefined;
  if (opensslMissing) console.warn("TLS config tests skipped: the openssl command is missing");
  /** A self-signed certificate and its key, made with openssl under `dir`/`name`-{c,k}.pem. */
  const selfSigned = (name: string): { cert: string; key: string } => {
    const cert = join(dir, `${name}-c.pem`);
    const key = join(dir, `${name}-k.pem`);
    const r = spawnSync(
      "openssl",
      [
        ...["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1"],
        ...["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
      ],
      { encoding: "utf8" },
    );
    if (r.status !== 0) throw new Error(`openssl failed: ${r.stderr}`);
    return { cert, key };
  };
  /** The ConfigError's problems of loading `env` (fails when it loads). */
  const problemsOf = (env: Record<string, string>): readonly string[] => {
    try {
      loadConfig(env, dir);
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return (err as ConfigError).problems;
    }
    throw new Error("loaded");
  };

  it("off by default: no TLS, no webhook listener", () => {
    const c = loadConfig({}, "/srv");
    expect(c.tls).toBeUndefined();
    expect(c.webhookPort).toBeUndefined();
  });

  it.skipIf(opensslMissing)(
    "reads both files (relative to the working folder); WEBHOOK_PORT defaults to 0",
    () => {
      const { cert, key } = selfSigned("ok");
      const c = loadConfig({ TLS_CERT_FILE: "ok-c.pem", TLS_KEY_FILE: key }, dir);
      expect(c.tls?.certFile).toBe(cert);
      expect(c.tls?.cert.toString()).toContain("-----BEGIN CERTIFICATE-----");
      expect(c.tls?.key.toString()).toContain("PRIVATE KEY-----");
      expect(c.webhookPort).toBe(0);
      expect(
        loadConfig({ TLS_CERT_FILE: cert, TLS_KEY_FILE: key, WEBHOOK_PORT: "3009" }, dir).webhookPort,
      ).toBe(3009);
      // With WEBHOOK_BASE_URL sandboxes post there: no webhook listener.
      expect(
        loadConfig(
          { TLS_CERT_FILE: cert, TLS_KEY_FILE: key, WEBHOOK_BASE_URL: "https://hooks.example.com" },
          dir,
        ).webhookPort,
      ).toBeUndefined();
    },
  );

  it("one file alone is refused, naming the other", () => {
    expect(problemsOf({ TLS_CERT_FILE: "c.pem" })).toEqual([
      "TLS_CERT_FILE and TLS_KEY_FILE go together: TLS_CERT_FILE is set, TLS_KEY_FILE is not (set both to serve TLS, neither for plain HTTP)",
    ]);
    expect(problemsOf({ TLS_KEY_FILE: "k.pem" })[0]).toMatch(
      /^TLS_CERT_FILE and TLS_KEY_FILE go together: TLS_KEY_FILE is set, TLS_CERT_FILE is not/,
    );
  });

  it("unreadable files are a ConfigError naming each file and why", () => {
    expect(problemsOf({ TLS_CERT_FILE: "missing-c.pem", TLS_KEY_FILE: "/" })).toEqual([
      `TLS_CERT_FILE ${join(dir, "missing-c.pem")} cannot be read: no such file`,
      "TLS_KEY_FILE / cannot be read: a folder, not a file",
    ]);
  });

  it.skipIf(opensslMissing)(
    "a key that is not the certificate's, or files that are not PEM, are refused",
    () => {
      const a = selfSigned("a");
      const b = selfSigned("b");
      const [mismatch, ...rest] = problemsOf({ TLS_CERT_FILE: a.cert, TLS_KEY_FILE: b.key });
      expect(rest).toEqual([]);
      expect(mismatch).toBe(
        `TLS_KEY_FILE ${b.key} is not the private key of TLS_CERT_FILE ${a.cert}'s certificate (CN=localhost)`,
      );
      const junk = join(dir, "junk.pem");
      writeFileSync(junk, "not a certificate\n");
      expect(problemsOf({ TLS_CERT_FILE: junk, TLS_KEY_FILE: junk })).toEqual([
        `TLS_CERT_FILE ${junk} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`,
        `TLS_KEY_FILE ${junk} holds no PEM private key (-----BEGIN PRIVATE KEY-----)`,
      ]);
      // The certificate and key swapped.
      expect(problemsOf({ TLS_CERT_FILE: a.key, TLS_KEY_FILE: a.cert })).toHaveLength(2);
    },
  );

  it.skipIf(opensslMissing)("an encrypted key is refused with how to decrypt it", () => {
    const { cert, key } = selfSigned("enc");
    const encrypted = join(dir, "enc-k-aes.pem");
    const r = spawnSync(
      "openssl",
      ["pkey", "-in", key, "-out", encrypted, "-aes256", "-passout", "pass:secret-pass"],
      { encoding: "utf8" },
    );
    expect(r.status, r.stderr).toBe(0);
    expect(problemsOf({ TLS_CERT_FILE: cert, TLS_KEY_FILE: encrypted })[0]).toMatch(
      /^TLS_KEY_FILE .*enc-k-aes\.pem is encrypted; the server takes an unencrypted key/,
    );
  });

  it.skipIf(opensslMissing)(
    "WEBHOOK_PORT: only with TLS and no WEBHOOK_BASE_URL, a port other than PORT and GRPC_PORT",
    () => {
      expect(problemsOf({ WEBHOOK_PORT: "3009" })).toEqual([
        "WEBHOOK_PORT is the port of the plain-HTTP webhook listener, which only a TLS server (TLS_CERT_FILE) without WEBHOOK_BASE_URL starts; unset it or set TLS_CERT_FILE and TLS_KEY_FILE",
      ]);
      const { cert, key } = selfSigned("wp");
      expect(
        problemsOf({
          TLS_CERT_FILE: cert,
          TLS_KEY_FILE: key,
          WEBHOOK_PORT: "3009",
          WEBHOOK_BASE_URL: "http://10.0.0.1:3000",
        }),
      ).toEqual([
        "WEBHOOK_PORT is the port of the plain-HTTP webhook listener, which only a TLS server (TLS_CERT_FILE) without WEBHOOK_BASE_URL starts; unset it",
      ]);
      expect(problemsOf({ TLS_CERT_FILE: cert, TLS_KEY_FILE: key, WEBHOOK_PORT: "3000" })).toEqual([
        "WEBHOOK_PORT must differ from PORT and GRPC_PORT (3000)",
      ]);
      expect(problemsOf({ TLS_CERT_FILE: cert, TLS_KEY_FILE: key, WEBHOOK_PORT: "x" })[0]).toMatch(
        /^WEBHOOK_PORT must be a port number/,
      );
    },
  );

  it.skipIf(opensslMissing)("docker on a bridge with TLS needs WEBHOOK_BASE_URL or the host network", () => {
    const { cert, key } = selfSigned("dk");
    const tls = { TLS_CERT_FILE: cert, TLS_KEY_FILE: key, SANDBOX_RUNTIME: "docker" };
    const [problem, ...rest] = problemsOf({ ...tls, HOST: "0.0.0.0" });
    expect(rest).toEqual([]);
    expect(problem).toMatch(
      /^DOCKER_NETWORK=bridge with TLS: sandboxes post their webhooks to a plain-HTTP listener/,
    );
    expect(loadConfig({ ...tls, DOCKER_NETWORK: "host" }, dir).webhookPort).toBe(0);
    expect(loadConfig({ ...tls, WEBHOOK_BASE_URL: "https://hooks.example.com" }, dir).tls).toBeDefined();
  });

  it("--help names the TLS variables and says https", () => {
    const doc = new Map(ENV_DOC);
    expect(doc.get("TLS_CERT_FILE")).toMatch(/HTTPS/);
    expect(doc.has("TLS_KEY_FILE")).toBe(true);
    expect(doc.get("WEBHOOK_PORT")).toMatch(/127\.0\.0\.1/);
    expect(doc.get("PORT")).toMatch(/https with TLS_CERT_FILE/);
  });
});

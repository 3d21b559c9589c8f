/**
 * The table of every environment variable the server reads, with its meaning: `--help` prints it and the README's
 * configuration table is checked against it (test/e2e/readme-quickstart.test.ts).
 */
import { TLS_ENV_DOC } from "./tls-config.ts";
import { WEB_ENV_DOC } from "./web-config.ts";

/** Every environment variable the server reads, with its meaning (README and --help print this). */
export const ENV_DOC: readonly [string, string][] = [
  ["HOST", "interface to listen on (default 127.0.0.1)"],
  ["PORT", "HTTP/1.1 port: REST, Connect, gRPC-Web; https with TLS_CERT_FILE (default 3000)"],
  ["GRPC_PORT", "HTTP/2 port for gRPC: cleartext, or TLS with TLS_CERT_FILE (default 3001)"],
  ...TLS_ENV_DOC,
  ["WORKERS", "server processes sharing PORT and GRPC_PORT, 1-64 (default 1: no cluster; docs/workers.md)"],
  ["DATA_DIR", "where SQLite, the key file and process sandboxes live (default ./data)"],
  ["MONGODB_URI", "use MongoDB at this URI instead of SQLite"],
  ["MONGODB_DB", "database name (default: from the URI, else agent_workspace)"],
  ["SESSION_API_KEY", "a key of user 'default' (in addition to keys made with the CLI)"],
  ["GIT_PROVIDER_VERIFY", "verify git tokens with the provider before storing (default true)"],
  ["GIT_PROVIDER_TIMEOUT_MS", "timeout of one git provider call (default 5000)"],
  [
    "GIT_PROVIDER_ALLOWED_HOSTS",
    "comma-separated provider hosts allowed besides public domain names: host, host:port, http://host:port (default none)",
  ],
  ["GIT_REPOSITORY_CACHE_SECONDS", "seconds a user's repository listing is cached (default 60; 0 disables)"],
  ["ENCRYPTION_KEY", "32-byte key for secrets at rest, base64 or hex (default: key file)"],
  ["ENCRYPTION_KEY_FILE", "key file, created with mode 0600 on first start (default DATA_DIR/secret.key)"],
  ["RATE_LIMIT_PER_SECOND", "requests per second per API key (default 200; 0 disables)"],
  ["RATE_LIMIT_BURST", "burst size per API key (default 400)"],
  ["SANDBOX_RUNTIME", "process (default) or docker"],
  ["MAX_RUNNING_SANDBOXES", "running sandboxes per user before the oldest is paused (default 5)"],
  [
    "MAX_SANDBOXES_PER_USER",
    "sandboxes a user may have, any status; one more is refused with 409 (default 20)",
  ],
  [
    "SWEEP_INTERVAL_MS",
    "period of the background sweep: sandboxes reconciled with the runtime, crash leftovers and cut deletes finished, unsaved start-task ends saved, the change log and finished start tasks pruned, freed SQLite pages given back (default 30000; 0: off)",
  ],
  [
    "CHANGE_LOG_RETENTION_MS",
    "change log entries older than this are pruned; a watch resuming from an older revision gets OUT_OF_RANGE and watches again (default 3600000)",
  ],
  [
    "CHANGE_LOG_MAX_ENTRIES",
    "the change log keeps at most this many entries, the newest, whatever their age (default 10000)",
  ],
  [
    "START_TASK_RETENTION_MS",
    "finished (READY or ERROR) conversation start tasks are deleted this long after their last change (default 86400000)",
  ],
  [
    "LEASE_MS",
    "lease of a server on a conversation start it runs; renewed every third of it, and once it expires (the server died) another server sharing the store resumes the start (default 15000)",
  ],
  [
    "SANDBOX_START_TIMEOUT_MS",
    "time a sandbox may take to start before it is ERROR; also how old a crash's leftover sandbox record must be before it is cleaned up (default 120000)",
  ],
  ["SANDBOX_SPECS_FILE", "JSON file with the sandbox spec list (overrides the defaults)"],
  ["DOCKER_SOCKET", "Docker socket path (default: DOCKER_HOST or /var/run/docker.sock)"],
  ["DOCKER_NETWORK", "network of sandbox containers: bridge (default), host, none, or a network name"],
  [
    "DOCKER_IMAGE",
    "image of the default docker spec (default ghcr.io/openhands/agent-server:5f62cee-python)",
  ],
  [
    "SANDBOX_ISOLATION",
    "process sandboxes: auto (default: bubblewrap when it works, else one user only), bwrap (required), none",
  ],
  ["SANDBOX_UID_BASE", "as root, isolated process sandboxes run as uids from this one (default 1000000000)"],
  [
    "LOCAL_REPOSITORY_ROOTS",
    "comma-separated absolute folders a conversation may start from by local path or file:// URL, bound read-only into sandboxes (default none: local repositories are refused)",
  ],
  [
    "SANDBOX_UID_LOCK_DIR",
    "as root, the host-wide folder where sandbox uids are claimed, one file per uid, so that servers on one host (any DATA_DIR) never share a uid (default /var/lib/agent-workspace/sandbox-uids)",
  ],
  [
    "SANDBOX_WARM_AGENTS",
    "process sandboxes: built-in agents kept started ahead of need, so that a start does not wait for one to boot (default 2; 0: none)",
  ],
  [
    "SANDBOX_WARM_CONTAINERS",
    "docker sandboxes: containers per sandbox spec kept started and healthy ahead of need, so that a start does not wait for the agent-server to boot; each idle one costs its memory (default 1; 0: none; docs/warm-pool.md)",
  ],
  [
    "SANDBOX_WARM_CLAIMS_PER_MINUTE",
    "warm agents or containers one user may take per minute (at most that many at once); a start past that starts cold, so that one user's start/delete loop cannot keep the pool empty for others (default 6; 0: no limit)",
  ],
  [
    "SANDBOX_DOCKER_USER",
    "uid[:gid] of the processes in sandbox containers (default: the image's own user; 1000:1000 for a root image)",
  ],
  [
    "SANDBOX_PIDS_LIMIT",
    "processes of one sandbox, docker and process runtimes (default 2048; docs/sandbox-isolation.md)",
  ],
  ["SANDBOX_MEMORY_MB", "memory of one sandbox, docker and process runtimes (default 4096)"],
  ["SANDBOX_CPUS", "CPUs of one sandbox, docker and process runtimes, e.g. 1.5 (default: no limit)"],
  ["SANDBOX_TMP_MB", "process sandboxes: size of their private /tmp (default 512)"],
  [
    "SANDBOX_NICE",
    "process sandboxes: niceness of their processes, so that under load the service runs first (default 10; 0: the service's)",
  ],
  [
    "SANDBOX_SHM_MB",
    "size of a sandbox's /dev/shm, docker and process runtimes (default 512: Chromium's renderers)",
  ],
  [
    "SANDBOX_DISK_MB",
    "size of one workspace: process sandboxes, a loop-mounted filesystem where the host allows, else watched; docker sandboxes, an ext4 volume on a loop device where the host allows (root, a local engine), else not limited (default 10240; 0: no limit)",
  ],
  [
    "SANDBOX_DISK_RESERVE_MB",
    "process sandboxes: no new one starts while SANDBOX_ROOT's file system has less free (default 1024)",
  ],
  [
    "SANDBOX_ROOT",
    "folder of process sandboxes' workspaces (default DATA_DIR/sandboxes; best its own filesystem)",
  ],
  ["LOG_LEVEL", "fatal, error, warn, info (default), debug, trace, silent"],
  ...WEB_ENV_DOC,
  [
    "MAX_MESSAGE_BYTES",
    "largest request body or message on REST, Connect, gRPC-Web and gRPC (default 1048576)",
  ],
  ["MAX_STREAMS_PER_KEY", "open streaming calls per API key, all protocols (default 16)"],
  ["MAX_STREAMS", "open streaming calls on the server (default 1000)"],
  ["MAX_CONNECTIONS", "open connections per listener, HTTP and gRPC each (default 10000)"],
  ["REQUEST_TIMEOUT_MS", "time for a whole HTTP request, headers and body, to arrive (default 30000)"],
  ["HEADERS_TIMEOUT_MS", "time for an HTTP request's headers to arrive (default 10000)"],
  ["MAX_SECRETS_PER_USER", "custom secrets a user may store; one more is refused with 409 (default 500)"],
  [
    "MAX_USER_DATA_BYTES",
    "size of a user's stored settings, provider tokens and custom secrets together; a write beyond is refused with 409 (default 1048576)",
  ],
  [
    "USER_DATA_WRITES_PER_SECOND",
    "changes of one user's settings and secrets per second (burst twice that); beyond, 429 (default 10; 0 disables)",
  ],
  [
    "MAX_EVENTS_PER_CONVERSATION",
    "events stored per conversation; a webhook batch beyond is refused with 409 (default 50000)",
  ],
  [
    "WEBHOOK_EVENTS_PER_SECOND",
    "events a sandbox may post per second, sustained; beyond, 429 (default 200; 0 disables)",
  ],
  ["WEBHOOK_EVENTS_BURST", "events a sandbox may post at once above its rate (default 5000)"],
  [
    "ADMIN_PORT",
    "serve /metrics, /docs and /openapi.json on this port only, off PORT (default: unset, they are on PORT and /metrics there wants an API key or METRICS_TOKEN)",
  ],
  ["ADMIN_HOST", "interface of the ADMIN_PORT listener (default 127.0.0.1)"],
  [
    "METRICS_TOKEN",
    "bearer token for /metrics (Authorization: Bearer ...), at least 16 characters; on ADMIN_PORT the only way in when set (default none)",
  ],
  [
    "WEBHOOK_MAX_BODY_BYTES",
    "largest event batch an agent server may post to its webhook (default 33554432: 32 MiB)",
  ],
  [
    "AGENT_PROXY",
    "true (default): conversations name their agent by this service's own origin, which forwards the agent's HTTP routes and events websocket to the sandbox, so browsers on other machines need only this one port; false: the agent's direct loopback URL (docs/agent-proxy.md)",
  ],
  [
    "PUBLIC_URL",
    "the origin browsers reach this service at (https://agents.example.com); agent URLs are then absolute on it (default: relative, the origin the browser used)",
  ],
  ["AGENT_PROXY_MAX_BODY_MB", "largest request body (an upload) forwarded to an agent (default 64)"],
  ["AGENT_PROXY_TIMEOUT_MS", "time an agent has to answer a forwarded call (default 120000)"],
  [
    "AGENT_PROXY_CALLS_PER_SECOND",
    "forwarded HTTP calls per second per sandbox, burst twice that; beyond, 429 (default 100; 0 disables)",
  ],
  [
    "AGENT_SOCKETS_PER_USER",
    "open agent websockets per user on one server process; one more is refused with 429 (default 32)",
  ],
  [
    "AGENT_SOCKET_MAX_MESSAGE_BYTES",
    "largest websocket message a client may send to an agent; beyond, the socket closes with 1009 (default 1048576)",
  ],
  [
    "AGENT_SOCKET_MESSAGES_PER_SECOND",
    "messages a client may send per second on one agent websocket, burst twice that; beyond, it closes with 1008 (default 20; 0 disables)",
  ],
  [
    "WEBHOOK_BASE_URL",
    "this service's URL as sandboxes reach it, for their event webhooks (default http://<HOST>:<PORT>; with TLS, http://127.0.0.1:<WEBHOOK_PORT>)",
  ],
];

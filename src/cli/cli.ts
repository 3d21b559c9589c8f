// Admin CLI: serve, keys create|list|revoke, and a user's sandboxes and settings through a running server. Exit
// codes: 0 ok, 1 failure, 2 usage error, 3 server unreachable. Started by main.ts after the Node.js version check.
import { parseArgs } from "node:util";
import { ApiKeyService } from "../domain/keys/api-key-service.ts";
import { runServer } from "../server/cluster.ts";
import { loadConfig } from "../server/config.ts";
import { ConfigError } from "../server/config-types.ts";
import { ENV_DOC } from "../server/env-doc.ts";
import { describeStorage, MissingDatabaseError, openStorage } from "../server/open-storage.ts";
import { ApiError, ConnectionError, createApiClient, parseAssignment, table } from "./api-client.ts";

const HELP = `Agent Workspace Service

Usage: npm run cli -- <command> [options]     (or: node src/cli/main.ts <command>)

Commands (server administration: run on the server's machine, same environment as the server):
  serve                          run the server (REST + Connect on PORT, gRPC on GRPC_PORT)
                                 (WORKERS=N: N processes share the ports; SIGHUP replaces them one by one)
  keys create --user NAME        create an API key; prints the key alone on the last line
             [--label TEXT]
  keys list [--user NAME]        list keys (id, user, label, created, revoked); never the keys themselves
  keys revoke ID                 revoke a key by its id
                                 (keys commands say which database they use, and refuse to create one:
                                 set DATA_DIR or MONGODB_URI as the server has them, or pass --init)
  sandboxes purge [--user NAME]  delete every sandbox of the store (or of NAME) with its processes or container
                                 and workspace: those a stopped server left running too (same environment as
                                 the server: DATA_DIR or MONGODB_URI, SANDBOX_RUNTIME; needs no key)

Commands (a user's data, through a running server; need --key or WORKSPACE_API_KEY):
  sandboxes list                 the caller's sandboxes, newest first
  sandboxes start [--spec ID]    start a sandbox (default spec when omitted)
  sandboxes pause|resume|delete ID
  settings get                   the caller's settings
  settings set KEY=VALUE ...     store some settings (values are JSON when they parse: 10, true, null; else text)
  chat [ID]                      a conversation in the terminal (docs/chat.md): a new one, or attach to ID (its
                                 history first; a paused sandbox is resumed). Type a message and Enter; Ctrl-C
                                 pauses the agent, /exit or Ctrl-D leaves, /help lists the chat's commands
       [--repo OWNER/NAME|PATH]  a new conversation in a clone of this repository (on --branch B)
       [-m TEXT]                 send TEXT as the first message
       [--json]                  every event as one JSON line (the chat's own lines go to stderr)

Options:
  --json                         machine-readable output
  --url URL                      server (default WORKSPACE_URL, else http://HOST:PORT from the environment;
                                 https with TLS_CERT_FILE: a self-signed one is trusted with NODE_EXTRA_CA_CERTS)
  --key KEY                      API key (default WORKSPACE_API_KEY)
  --init                         keys commands: create the database when there is none yet
  -h, --help                     this text

Exit codes: 0 ok, 1 the server refused (message shown), 2 usage error, 3 server unreachable.

Examples:
  npm start
  DATA_DIR=/srv/workspace npm run --silent cli -- keys create --user alice
  npm run cli -- keys list --user alice --json
  WORKSPACE_API_KEY=ws_... npm run cli -- sandboxes start
  npm run cli -- --key ws_... settings set llm_model=anthropic/claude-sonnet-4-5 max_iterations=50
  npm run cli -- --key ws_... sandboxes list --json
  WORKSPACE_API_KEY=ws_... npm run cli -- chat --repo octocat/hello-world -m "What does this do?"
  WORKSPACE_API_KEY=ws_... npm run cli -- chat 577f318cb22e438f99aa15b7309597d0
  curl -H "X-Session-API-Key: $KEY" localhost:3000/api/settings

Environment:
${ENV_DOC.map(([k, v]) => `  ${k.padEnd(24)} ${v}`).join("\n")}
`;

class UsageError extends Error {}
/** A failure with a message for the user, exit code 1. */
class CliFailure extends Error {}

/**
 * Opens the configured store for a keys command, saying which one on stderr (stdout stays the command's output).
 * A store that does not exist yet is created only with --init: without it, a command run outside the server's
 * environment would quietly make a new, empty database whose keys the server never sees.
 */
async function withKeys<T>(init: boolean, fn: (keys: ApiKeyService) => Promise<T>): Promise<T> {
  const config = loadConfig();
  const where = describeStorage(config.storage, config.dataDir);
  let storage: Awaited<ReturnType<typeof openStorage>>;
  try {
    storage = await openStorage(config.storage, { mustExist: !init });
  } catch (err) {
    if (!(err instanceof MissingDatabaseError)) throw err;
    const variables = config.storage.kind === "sqlite" ? "DATA_DIR" : "MONGODB_URI (and MONGODB_DB)";
    throw new CliFailure(
      `no database yet: ${where}. Set ${variables} as the server has it, or pass --init to create a new, empty database there`,
    );
  }
  process.stderr.write(`using ${where}\n`);
  try {
    return await fn(new ApiKeyService(storage.apiKeys));
  } finally {
    await storage.close();
  }
}

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      user: { type: "string" },
      label: { type: "string" },
      json: { type: "boolean", default: false },
      url: { type: "string" },
      key: { type: "string" },
      spec: { type: "string" },
      init: { type: "boolean", default: false },
      repo: { type: "string" },
      branch: { type: "string" },
      message: { type: "string", short: "m" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  const [command, sub, arg] = positionals;
  if (values.help || command === undefined || command === "help") {
    process.stdout.write(HELP);
    return command === undefined && !values.help ? 2 : 0;
  }
  if (command === "serve") return runServer(loadConfig());
  if (command === "keys") {
    if (sub === "create") {
      const user = values.user;
      if (user === undefined) throw new UsageError("keys create needs --user NAME");
      if (!ApiKeyService.isValidUserId(user))
        throw new UsageError(`invalid user name ${JSON.stringify(user)}: letters, digits, . _ @ - (max 128)`);
      const issued = await withKeys(values.init, (k) => k.issue(user, values.label ?? null));
      if (values.json)
        process.stdout.write(`${JSON.stringify({ id: issued.record.id, user, key: issued.key })}\n`);
      else
        process.stdout.write(
          `Created key ${issued.record.id} for user ${user}. It is shown only now:\n${issued.key}\n`,
        );
      return 0;
    }
    if (sub === "list") {
      const list = await withKeys(values.init, (k) => k.list(values.user));
      if (values.json) {
        process.stdout.write(`${JSON.stringify(list.map(({ hash: _h, ...rest }) => rest))}\n`);
      } else {
        const rows = list.map((k) => [
          k.id,
          k.userId,
          k.label ?? "",
          k.createdAt.toISOString(),
          k.revokedAt?.toISOString() ?? "",
        ]);
        const head = ["ID", "USER", "LABEL", "CREATED", "REVOKED"];
        const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
        for (const r of [head, ...rows])
          process.stdout.write(
            `${r
              .map((c, i) => c.padEnd(widths[i] ?? 0))
              .join("  ")
              .trimEnd()}\n`,
          );
        if (rows.length === 0) process.stdout.write("(no keys)\n");
      }
      return 0;
    }
    if (sub === "revoke") {
      if (arg === undefined) throw new UsageError("keys revoke needs a key id (see keys list)");
      const ok = await withKeys(values.init, (k) => k.revoke(arg));
      if (!ok) {
        process.stderr.write(`no active key with id ${arg}\n`);
        return 1;
      }
      process.stdout.write(`revoked ${arg}\n`);
      return 0;
    }
    throw new UsageError(`unknown keys command ${JSON.stringify(sub ?? "")}: create, list or revoke`);
  }
  if (command === "sandboxes" && sub === "purge") {
    if (arg !== undefined)
      throw new UsageError("sandboxes purge takes no id: --user NAME limits it to a user");
    return purgeCommand(values.user);
  }
  if (command === "sandboxes" || command === "settings" || command === "chat") {
    const key = values.key ?? process.env.WORKSPACE_API_KEY;
    if (key === undefined || key === "")
      throw new UsageError(`${command} needs an API key: --key KEY or WORKSPACE_API_KEY`);
    const url =
      values.url ??
      process.env.WORKSPACE_URL ??
      `${process.env.TLS_CERT_FILE ? "https" : "http"}://${process.env.HOST || "127.0.0.1"}:${process.env.PORT || "3000"}`;
    if (command === "chat") {
      if (arg !== undefined) throw new UsageError("chat takes one conversation id at most");
      if (sub !== undefined && (values.repo !== undefined || values.branch !== undefined))
        throw new UsageError("--repo and --branch start a new conversation: leave out the conversation id");
      const { runChat } = await import("./chat.ts");
      return runChat({
        url,
        key,
        conversationId: sub,
        json: values.json,
        repo: values.repo,
        branch: values.branch,
        message: values.message,
      });
    }
    const api = createApiClient(url, key);
    const print = (json: unknown, human: () => string) =>
      process.stdout.write(`${values.json ? JSON.stringify(json, null, 2) : human()}\n`);
    if (command === "sandboxes") return sandboxesCommand(api, url, sub, arg, values.spec, print);
    return settingsCommand(api, sub, positionals.slice(2), print);
  }
  throw new UsageError(`unknown command ${JSON.stringify(command)}`);
}

/**
 * `sandboxes purge`: every sandbox of the store (or of one user) deleted, through the store and the runtime
 * directly (serve.ts), as the keys commands open the store: the cleanup after a server that left them running.
 */
async function purgeCommand(userId: string | undefined): Promise<number> {
  const config = loadConfig();
  const where = describeStorage(config.storage, config.dataDir);
  process.stderr.write(`using ${where}, ${config.runtime.kind} sandboxes\n`);
  const { purgeSandboxes } = await import("../server/serve.ts");
  let purged: Awaited<ReturnType<typeof purgeSandboxes>>;
  try {
    purged = await purgeSandboxes(config, {
      userId,
      onDeleted: (s) =>
        s.error === undefined
          ? process.stdout.write(`deleted ${s.id} (user ${s.userId}, was ${s.status})\n`)
          : process.stderr.write(`could not delete ${s.id} (user ${s.userId}): ${s.error}\n`),
    });
  } catch (err) {
    if (err instanceof MissingDatabaseError)
      throw new CliFailure(`no database yet: ${where}. Set DATA_DIR or MONGODB_URI as the server has it`);
    throw err;
  }
  const failed = purged.filter((s) => s.error !== undefined).length;
  const deleted = purged.length - failed;
  if (purged.length === 0)
    process.stdout.write(`(no sandboxes${userId === undefined ? "" : ` of user ${userId}`})\n`);
  else
    process.stdout.write(
      `deleted ${deleted} sandbox${deleted === 1 ? "" : "es"}${failed > 0 ? `; ${failed} could not be deleted` : ""}\n`,
    );
  return failed > 0 ? 1 : 0;
}

type Api = ReturnType<typeof createApiClient>;
type Print = (json: unknown, human: () => string) => void;
interface SandboxJson {
  id: string;
  status: string;
  sandbox_spec_id: string;
  created_at: string;
  exposed_urls: { name: string; url: string }[] | null;
}

/**
 * Where a client reaches a sandbox's agent (with the sandbox's session key): its AGENT_SERVER URL, which is "/"
 * (the server's own origin, which forwards agent calls) unless the server names another origin (PUBLIC_URL) or
 * runs without the agent proxy (the agent's own loopback URL); a relative one is resolved against the URL this CLI
 * called. Empty while the sandbox does not run.
 */
function agentUrlOf(s: Pick<SandboxJson, "exposed_urls">, base: string): string {
  const url = s.exposed_urls?.find((u) => u.name === "AGENT_SERVER")?.url;
  if (url === undefined || url === "") return "";
  try {
    const resolved = new URL(url, base);
    return resolved.pathname === "/" && resolved.search === "" ? resolved.origin : resolved.href;
  } catch {
    return url;
  }
}

async function sandboxesCommand(
  api: Api,
  base: string,
  sub: string | undefined,
  id: string | undefined,
  spec: string | undefined,
  print: Print,
): Promise<number> {
  const row = (s: SandboxJson) => [s.id, s.status, s.sandbox_spec_id, s.created_at, agentUrlOf(s, base)];
  const head = ["ID", "STATUS", "SPEC", "CREATED", "AGENT URL"];
  if (sub === "list") {
    const items: SandboxJson[] = [];
    let page: string | null = null;
    do {
      const query: string = page === null ? "" : `&page_id=${encodeURIComponent(page)}`;
      const r: { items: SandboxJson[]; next_page_id: string | null } = await api(
        "GET",
        `/api/v1/sandboxes/search?limit=100${query}`,
      );
      items.push(...r.items);
      page = r.next_page_id;
    } while (page !== null);
    print(items, () => (items.length === 0 ? "(no sandboxes)" : table(head, items.map(row))));
    return 0;
  }
  if (sub === "start") {
    const s = await api<SandboxJson>(
      "POST",
      `/api/v1/sandboxes${spec ? `?sandbox_spec_id=${encodeURIComponent(spec)}` : ""}`,
    );
    print(s, () => table(head, [row(s)]));
    return 0;
  }
  if (sub === "pause" || sub === "resume" || sub === "delete") {
    if (id === undefined) throw new UsageError(`sandboxes ${sub} needs a sandbox id (see sandboxes list)`);
    const path = `/api/v1/sandboxes/${encodeURIComponent(id)}`;
    const r = await api<{ success: boolean }>(
      sub === "delete" ? "DELETE" : "POST",
      sub === "delete" ? path : `${path}/${sub}`,
    );
    print(r, () => `${sub === "delete" ? "deleted" : sub === "pause" ? "paused" : "resumed"} ${id}`);
    return 0;
  }
  throw new UsageError(
    `unknown sandboxes command ${JSON.stringify(sub ?? "")}: list, start, pause, resume or delete`,
  );
}

async function settingsCommand(
  api: Api,
  sub: string | undefined,
  assignments: string[],
  print: Print,
): Promise<number> {
  if (sub === "get") {
    const s = await api<Record<string, unknown>>("GET", "/api/settings");
    const show = (v: unknown) => (v === null ? "-" : typeof v === "string" ? v : JSON.stringify(v));
    print(s, () =>
      table(
        ["SETTING", "VALUE"],
        Object.entries(s).map(([k, v]) => [k, show(v)]),
      ),
    );
    return 0;
  }
  if (sub === "set") {
    if (assignments.length === 0) throw new UsageError("settings set needs KEY=VALUE arguments");
    let body: Record<string, unknown>;
    try {
      body = Object.fromEntries(assignments.map(parseAssignment));
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
    const r = await api<{ message: string }>("POST", "/api/settings", body);
    print(r, () => r.message);
    return 0;
  }
  throw new UsageError(`unknown settings command ${JSON.stringify(sub ?? "")}: get or set`);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    const code = (err as { code?: string }).code;
    if (err instanceof UsageError || (code?.startsWith("ERR_PARSE_ARGS_") ?? false)) {
      process.stderr.write(`error: ${(err as Error).message} (see --help)\n`);
      process.exitCode = 2;
    } else if (err instanceof CliFailure) {
      process.stderr.write(`error: ${err.message}\n`);
      process.exitCode = 1;
    } else if (err instanceof ApiError) {
      process.stderr.write(`error (HTTP ${err.status}): ${err.message}\n`);
      process.exitCode = 1;
    } else if (err instanceof ConnectionError) {
      process.stderr.write(`error: ${err.message}\n`);
      process.exitCode = 3;
    } else if (err instanceof ConfigError) {
      process.stderr.write(
        err.problems.length === 1
          ? `configuration error: ${err.message}\n`
          : `${err.problems.length} configuration errors:\n${err.problems.map((p) => `  ${p}\n`).join("")}`,
      );
      process.exitCode = 1;
    } else {
      process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exitCode = 1;
    }
  },
);

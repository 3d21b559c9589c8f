#!/usr/bin/env node
// Admin CLI: serve, keys create|list|revoke. Exit codes: 0 ok, 1 failure, 2 usage error.
import { parseArgs } from "node:util";
import { ConfigError, ENV_DOC, loadConfig } from "../server/config.ts";
import { openStorage } from "../server/open-storage.ts";
import { serve } from "../server/serve.ts";
import { ApiKeyService } from "../services/keys/api-key-service.ts";

const HELP = `Agent Workspace Service

Usage: npm run cli -- <command> [options]     (or: node src/cli/main.ts <command>)

Commands:
  serve                          run the server (REST + Connect on PORT, gRPC on GRPC_PORT)
  keys create --user NAME        create an API key; prints the key alone on the last line
             [--label TEXT]
  keys list [--user NAME]        list keys (id, user, label, created, revoked); never the keys themselves
  keys revoke ID                 revoke a key by its id
  help                           this text

Options: --json (keys list/create: machine-readable output)

Examples:
  npm start
  npm run --silent cli -- keys create --user alice
  npm run cli -- keys list --user alice --json
  curl -H "X-Session-API-Key: $KEY" localhost:3000/api/settings

Environment:
${ENV_DOC.map(([k, v]) => `  ${k.padEnd(24)} ${v}`).join("\n")}
`;

class UsageError extends Error {}

async function withKeys<T>(fn: (keys: ApiKeyService) => Promise<T>): Promise<T> {
  const config = loadConfig();
  const storage = await openStorage(config.storage);
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
      help: { type: "boolean", short: "h", default: false },
    },
  });
  const [command, sub, arg] = positionals;
  if (values.help || command === undefined || command === "help") {
    process.stdout.write(HELP);
    return command === undefined && !values.help ? 2 : 0;
  }
  if (command === "serve") {
    await serve(loadConfig());
    return 0;
  }
  if (command === "keys") {
    if (sub === "create") {
      const user = values.user;
      if (user === undefined) throw new UsageError("keys create needs --user NAME");
      if (!ApiKeyService.isValidUserId(user))
        throw new UsageError(`invalid user name ${JSON.stringify(user)}: letters, digits, . _ @ - (max 128)`);
      const issued = await withKeys((k) => k.issue(user, values.label ?? null));
      if (values.json)
        process.stdout.write(`${JSON.stringify({ id: issued.record.id, user, key: issued.key })}\n`);
      else
        process.stdout.write(
          `Created key ${issued.record.id} for user ${user}. It is shown only now:\n${issued.key}\n`,
        );
      return 0;
    }
    if (sub === "list") {
      const list = await withKeys((k) => k.list(values.user));
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
      const ok = await withKeys((k) => k.revoke(arg));
      if (!ok) {
        process.stderr.write(`no active key with id ${arg}\n`);
        return 1;
      }
      process.stdout.write(`revoked ${arg}\n`);
      return 0;
    }
    throw new UsageError(`unknown keys command ${JSON.stringify(sub ?? "")}: create, list or revoke`);
  }
  throw new UsageError(`unknown command ${JSON.stringify(command)}`);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    if (err instanceof UsageError || (err as { code?: string }).code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") {
      process.stderr.write(`error: ${(err as Error).message}\n\n${HELP}`);
      process.exitCode = 2;
    } else if (err instanceof ConfigError) {
      process.stderr.write(`configuration error: ${err.message}\n`);
      process.exitCode = 1;
    } else {
      process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exitCode = 1;
    }
  },
);

import { readFileSync } from "node:fs";
import { BUILTIN_AGENT_COMMAND } from "../../agent/shared/builtin-agent.ts";
import type { SandboxSpec } from "../domain/sandboxes/sandbox-spec-service.ts";
import { ConfigError, type RuntimeConfig } from "./config-types.ts";

/** The reference's environment for its agent-server image. */
const AGENT_SERVER_ENV: Record<string, string> = {
  OPENVSCODE_SERVER_ROOT: "/openhands/.openvscode-server",
  OH_ENABLE_VNC: "0",
  LOG_JSON: "true",
  OH_CONVERSATIONS_PATH: "/workspace/conversations",
  OH_BASH_EVENTS_DIR: "/workspace/bash_events",
  PYTHONUNBUFFERED: "1",
  ENV_LOG_LEVEL: "20",
};

/** Built-in spec list of a runtime: the first is the default. */
export function defaultSpecs(
  runtime: { kind: "process" } | Pick<Extract<RuntimeConfig, { kind: "docker" }>, "kind" | "image">,
  now: Date,
): SandboxSpec[] {
  if (runtime.kind === "docker") {
    return [
      {
        id: runtime.image,
        // {host}: loopback on the host network, every interface of its own network namespace otherwise.
        command: ["--host", "{host}", "--port", "{port}"],
        initialEnv: AGENT_SERVER_ENV,
        workingDir: "/workspace/project",
        createdAt: now,
      },
    ];
  }
  return [
    {
      id: "workspace-agent",
      command: [BUILTIN_AGENT_COMMAND],
      initialEnv: {},
      workingDir: "",
      createdAt: now,
    },
  ];
}

/**
 * Reads a spec list: a JSON array of {id, command?, initial_env?, working_dir?}. Throws ConfigError naming the
 * problem (the server refuses to start with a bad list).
 */
export function loadSpecsFile(path: string, now: Date): SandboxSpec[] {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    throw new ConfigError(`SANDBOX_SPECS_FILE ${path}: ${(err as Error).message}`);
  }
  if (!Array.isArray(raw) || raw.length === 0)
    throw new ConfigError(`SANDBOX_SPECS_FILE ${path}: expected a non-empty JSON array of specs`);
  const ids = new Set<string>();
  return raw.map((item: unknown, i) => {
    const at = `SANDBOX_SPECS_FILE ${path}: spec ${i}`;
    if (typeof item !== "object" || item === null) throw new ConfigError(`${at} is not an object`);
    const s = item as Record<string, unknown>;
    if (typeof s.id !== "string" || s.id === "")
      throw new ConfigError(`${at}: id must be a non-empty string`);
    if (ids.has(s.id)) throw new ConfigError(`${at}: duplicate id ${s.id}`);
    ids.add(s.id);
    const command = s.command ?? [];
    if (!Array.isArray(command) || !command.every((c) => typeof c === "string"))
      throw new ConfigError(`${at}: command must be an array of strings`);
    const env = s.initial_env ?? {};
    if (
      typeof env !== "object" ||
      env === null ||
      Array.isArray(env) ||
      !Object.values(env).every((v) => typeof v === "string")
    ) {
      throw new ConfigError(`${at}: initial_env must map names to strings`);
    }
    const workingDir = s.working_dir ?? "";
    if (typeof workingDir !== "string") throw new ConfigError(`${at}: working_dir must be a string`);
    return {
      id: s.id,
      command: command as string[],
      initialEnv: env as Record<string, string>,
      workingDir,
      createdAt: now,
    };
  });
}

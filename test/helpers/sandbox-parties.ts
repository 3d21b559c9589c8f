// Users ("parties") each with a running process sandbox of their own on a test app, and what the sandbox tests do
// from inside one: run a shell command through its agent, probe a TCP port, find its agent's process. Shared by
// the suites that set one user's sandbox against another's (test/e2e/sandbox-network.test.ts,
// test/e2e/hostile-agent-ports.test.ts).
import { expect } from "vitest";
import { connectProbe } from "./agent-address.ts";
import { agentProcesses } from "./agent-processes.ts";
import { call, type TestApp } from "./test-app.ts";
import { until } from "./until.ts";

/** A user with a key and a running sandbox. */
export interface Party {
  key: string;
  id: string;
  /** The sandbox's session key, which its agent asks for. */
  sandboxKey: string;
  /** The agent's own URL (AGENT_SERVER_DIRECT). */
  agent: string;
  workspace: string;
}

/** A sandbox as the REST API lists it (the fields used here). */
export interface SandboxJson {
  id: string;
  status: string;
  session_api_key: string | null;
  exposed_urls: { name: string; url: string }[] | null;
}

/** The user's sandbox as the REST API lists it now. */
export const sandboxOf = async (t: TestApp, key: string, id: string): Promise<SandboxJson | undefined> =>
  ((await call(t.url, key, "GET", `/api/v1/sandboxes?id=${id}`)).body as SandboxJson[])[0];

/** Makes a key for `user`, starts a sandbox with it and waits until it runs. */
export async function party(t: TestApp, user: string): Promise<Party> {
  const key = await t.keyFor(user);
  const created = await call(t.url, key, "POST", "/api/v1/sandboxes");
  expect(created.status).toBe(200);
  const id = (created.body as SandboxJson).id;
  const running = await until(
    async () => sandboxOf(t, key, id),
    (s) => s?.status === "RUNNING" || s?.status === "ERROR",
  );
  expect(running?.status).toBe("RUNNING");
  const agent = running?.exposed_urls?.find((u) => u.name === "AGENT_SERVER_DIRECT")?.url ?? "";
  const record = await t.storage.sandboxes.get(id);
  const workspace = String(
    (record?.handle as { data?: { workspace?: string } } | undefined)?.data?.workspace,
  );
  return { key, id, sandboxKey: running?.session_api_key ?? "", agent, workspace };
}

/** Runs a shell command in the party's sandbox through its agent. */
export async function bash(
  p: Party,
  command: string,
  timeout = 60,
): Promise<{ exit_code: number; stdout: string }> {
  const res = await fetch(`${p.agent}/api/bash/execute_bash_command`, {
    method: "POST",
    headers: { "x-session-api-key": p.sandboxKey, "content-type": "application/json" },
    body: JSON.stringify({ command, timeout }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { exit_code: number; stdout: string };
}

/** What a TCP connect from inside the party's sandbox to host:port gives ("connected", an error code, "timeout"). */
export const probe = async (p: Party, host: string, port: number | string): Promise<string> =>
  (await bash(p, `${process.execPath} -e '${connectProbe(host, port)}'`)).stdout.trim();

/** The pid of the party's agent (the Node process running the built-in agent in its workspace). */
export function agentPid(p: Party): number {
  const [agent] = agentProcesses(p.workspace);
  if (agent === undefined) throw new Error(`no agent in ${p.workspace}`);
  return agent.pid;
}

/**
 * The terminal chat on the Docker runtime with the default spec, the agent-server image, run against its stand-in
 * (test/standin-agent-server, built offline by .ci/docker.sh from the real agent-server's contract): the chat starts
 * a conversation through the service with only the user's key, shows the agent-server's events as a person reads
 * them (the start's steps, the user's messages, the status), sends a follow-up, and pauses the agent on Ctrl-C. The
 * stand-in runs no model, so a turn stays `running` until paused, as the real agent-server's would while its model
 * thinks. Skips with the reason where no Docker engine or image exists.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createDockerRuntime,
  type DockerRuntime,
} from "../../src/adapters/runtimes/docker/docker-runtime.ts";
import { defaultSpecs } from "../../src/server/sandbox-specs.ts";
import { ChatProcess } from "../helpers/chat-process.ts";
import { dockerFromEnv, findAgentServerImage } from "../helpers/docker-env.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";
import { until } from "../helpers/until.ts";

const docker = dockerFromEnv();
const found = await findAgentServerImage(docker);
const skipReason = typeof found === "string" ? found : null;
if (skipReason) console.log(`chat on the agent-server image skipped: ${skipReason}`);

describe.skipIf(skipReason !== null)(
  `the terminal chat on the agent-server image${skipReason ? ` (skipped: ${skipReason})` : ""}`,
  () => {
    let t: TestApp;
    let runtime: DockerRuntime;
    let key = "";
    const runId = randomBytes(4).toString("hex");

    beforeAll(async () => {
      const image = typeof found === "string" ? "unused" : found.image;
      runtime = createDockerRuntime({
        docker,
        network: "host",
        labels: { "workspace.test-run": runId },
        stopTimeoutSeconds: 2,
      });
      t = await startTestApp({ runtime, specs: defaultSpecs({ kind: "docker", image }, new Date()) });
      key = await t.keyFor("alice");
      const saved = await call(t.url, key, "POST", "/api/settings", {
        llm_model: "anthropic/claude-sonnet-4-5",
        llm_api_key: "sk-chat-docker-0123456789",
      });
      expect(saved.status, saved.text).toBe(200);
    }, 60_000);

    afterAll(async () => {
      if (t !== undefined) {
        const listed = (await call(t.url, key, "GET", "/api/v1/sandboxes/search")).body as {
          items: { id: string }[];
        };
        for (const s of listed.items ?? []) await call(t.url, key, "DELETE", `/api/v1/sandboxes/${s.id}`);
        await t.close();
      }
      await runtime?.close();
    }, 60_000);

    it("starts a conversation, shows its events, sends a follow-up and pauses on Ctrl-C", async () => {
      const chat = new ChatProcess(t.url, key, ["-m", "Hello from the terminal"]);
      await chat.expect("Starting a conversation", 30_000);
      const ready = await chat.expect(/Conversation ([0-9a-f]{32}) is ready/, 60_000);
      const id = /Conversation ([0-9a-f]{32}) is ready/.exec(ready)?.[1] ?? "";
      await chat.expect("Hello from the terminal", 30_000);
      await chat.expect("running", 30_000);
      chat.send("A follow-up");
      await chat.expect("A follow-up", 30_000);
      // Ctrl-C while the agent runs: paused through the service (the agent-server's POST .../pause).
      chat.proc.kill("SIGINT");
      await chat.expect("paused", 30_000);
      const listed = await until(
        async () =>
          (
            (await call(t.url, key, "GET", `/api/v1/app-conversations?ids=${id}`)).body as {
              execution_status: string | null;
            }[]
          )[0],
        (c) => c?.execution_status === "paused",
      );
      expect(listed?.execution_status).toBe("paused");
      chat.send("/exit");
      expect(await chat.exitCode()).toBe(0);
      // A person reads no JSON: no raw event object was printed.
      expect(chat.stdout).not.toMatch(/"kind"\s*:/);
    }, 180_000);
  },
);

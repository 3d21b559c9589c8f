/**
 * A conversation held from a second host: a client in a network namespace of its own (test/helpers/netns.ts), which
 * reaches this machine only at 10.77.<n>.1, the address the service listens on, does what the OpenHands UI does
 * (test/e2e/fixtures/other-host-client.ts): starts a conversation, resolves its relative `conversation_url` against
 * the page's origin, follows the agent's events on the websocket through the service, calls the agent's HTTP routes
 * through the service and sends a second message on the socket. It proves that a browser elsewhere needs the
 * service's address and nothing else: every URL it used is the service's, and the agent's own port is not
 * reachable from there. Over plain HTTP and over TLS on the process runtime with the built-in agent and a scripted
 * model, and on the Docker runtime with the agent-server stand-in image. Needs root for the namespace; skips and
 * says why without it (and the Docker case without Docker).
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  createDockerRuntime,
  type DockerRuntime,
} from "../../src/adapters/runtimes/docker/docker-runtime.ts";
import type { ProcessRuntime } from "../../src/adapters/runtimes/process/process-runtime-types.ts";
import { defaultSpecs } from "../../src/server/sandbox-specs.ts";
import { directAgentUrl } from "../helpers/agent-address.ts";
import { dockerFromEnv, findAgentServerImage } from "../helpers/docker-env.ts";
import { type FakeLlm, startFakeLlm } from "../helpers/fake-llm.ts";
import { makeNetNs, type NetNs, probeTcp } from "../helpers/netns.ts";
import { startTestApp, type TestApp } from "../helpers/test-app.ts";

const CLIENT = join(import.meta.dirname, "fixtures", "other-host-client.ts");

const made = makeNetNs();
const nsSkip = "reason" in made ? made.reason : null;
if (nsSkip) console.log(`other-host tests skipped: ${nsSkip}`);
const ns = made as NetNs;
afterAll(() => {
  if (nsSkip === null) ns.remove();
});

interface ClientOutput {
  ok: boolean;
  error?: string;
  conversationId?: string;
  conversationUrl?: string | null;
  exposedUrls?: { name: string; url: string; port: number }[] | null;
  eventCountOnOpen?: unknown;
  firstReply?: string | null;
  observation?: string | null;
  secondReply?: string | null;
  secondObservation?: string | null;
  bash?: { exit_code: number; stdout: string };
  userMessages?: string[];
  /** The socket's MessageEvents, all found in the service's event store (delivered by the agent's webhooks). */
  storedMessages?: number;
  urls: string[];
  eventKinds: string[];
}

/** Runs the client in the namespace against `t` and returns what it printed (failing with its output). */
async function runClient(
  t: TestApp,
  config: Record<string, unknown>,
  env: NodeJS.ProcessEnv = process.env,
): Promise<ClientOutput> {
  const r = await ns.run(
    [process.execPath, CLIENT, JSON.stringify({ url: t.url, timeoutMs: 120_000, ...config })],
    {
      env,
      timeoutMs: 150_000,
    },
  );
  const line = r.stdout.trim().split("\n").at(-1) ?? "";
  let out: ClientOutput;
  try {
    out = JSON.parse(line) as ClientOutput;
  } catch {
    throw new Error(`the client printed no JSON (exit ${r.code ?? r.signal}): ${r.stdout}\n${r.stderr}`);
  }
  expect(out.ok, `${out.error}\n${JSON.stringify(out, null, 1)}\n${r.stderr}`).toBe(true);
  return out;
}

/**
 * What every case proves about addresses: the conversation URL is relative (the page's origin), every URL the
 * client used is the service's (the scheme `http`/`ws` or `https`/`wss` as the page's), and from the namespace only
 * the service's port answers on this machine's link address; the agent's own port does not, nor its direct URL (on
 * this machine's loopback, or the sandbox's own address where process sandboxes have networks of their own).
 */
async function expectOnlyTheService(t: TestApp, out: ClientOutput): Promise<void> {
  const service = new URL(t.url);
  expect(service.hostname).toBe(ns.hostAddress);
  expect(out.conversationUrl).toBe(`/api/conversations/${out.conversationId}`);
  const schemes = service.protocol === "https:" ? ["https:", "wss:"] : ["http:", "ws:"];
  expect(out.urls.length).toBeGreaterThan(5);
  for (const u of out.urls) {
    const url = new URL(u);
    expect(url.host, u).toBe(service.host);
    expect(schemes, u).toContain(url.protocol);
    expect(u).not.toContain("127.0.0.1");
  }
  expect(out.urls.some((u) => u.startsWith(`${schemes[1]}//${service.host}/sockets/events/`))).toBe(true);
  expect(out.urls.some((u) => u.endsWith("/api/bash/execute_bash_command"))).toBe(true);

  // The sandbox JSON names the agent through the service ("/") and its direct URL apart.
  expect(out.exposedUrls?.find((u) => u.name === "AGENT_SERVER")?.url).toBe("/");
  const direct = out.exposedUrls?.find((u) => u.name === "AGENT_SERVER_DIRECT");
  const network =
    t.runtime.kind === "process" ? (t.runtime as ProcessRuntime).network : { mode: "host" as const };
  expect(direct?.url).toMatch(directAgentUrl(network));
  const directUrl = new URL(direct?.url ?? "http://x");
  const agentPort = Number(directUrl.port);
  expect(agentPort).toBeGreaterThan(0);
  expect(agentPort).not.toBe(Number(service.port));
  // A host that routes the sandboxes' subnet through this machine, the worst case: still no way in.
  if (network.mode === "isolated") {
    const routed = await ns.run(["ip", "route", "replace", network.subnet, "via", ns.hostAddress]);
    expect(routed.code, routed.stderr).toBe(0);
  }
  const [viaLink, viaDirect, serviceViaLink] = await Promise.all([
    probeTcp(ns, ns.hostAddress, agentPort),
    probeTcp(ns, directUrl.hostname, agentPort),
    probeTcp(ns, ns.hostAddress, Number(service.port)),
  ]);
  expect(["refused", "timeout"], `agent port ${agentPort} at ${ns.hostAddress}`).toContain(viaLink);
  expect(["refused", "timeout"], `agent's direct URL ${direct?.url} from the namespace`).toContain(viaDirect);
  expect(serviceViaLink).toBe("connected");
}

/** The environment of a client that trusts the system's CAs and `ca` (a PEM file), and verifies certificates. */
function trusting(ca: string | undefined): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.NODE_TLS_REJECT_UNAUTHORIZED;
  delete env.NODE_EXTRA_CA_CERTS;
  return ca === undefined ? env : { ...env, NODE_EXTRA_CA_CERTS: ca };
}

const FIRST = "Write 42 to answer.txt and say hello";
const SECOND = "Show me answer.txt";

describe.skipIf(nsSkip !== null)(
  `a conversation from another host, built-in agent${nsSkip ? ` (skipped: ${nsSkip})` : ""}`,
  () => {
    let llm: FakeLlm;
    let dir: string;
    beforeAll(async () => {
      llm = await startFakeLlm();
      dir = mkdtempSync(join(tmpdir(), "other-host-"));
    });
    afterAll(async () => {
      await llm?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    /** The two turns the model answers: a terminal call then a message, each. */
    const script = (tag: string) =>
      llm.script(
        {
          content: "Writing it.",
          toolCalls: [
            { name: "terminal", arguments: { command: `echo 42 > answer.txt && echo hello-${tag}` } },
          ],
        },
        { content: `Done: hello from ${tag}.` },
        {
          content: "Reading it.",
          toolCalls: [{ name: "terminal", arguments: { command: "cat answer.txt" } }],
        },
        { content: "answer.txt holds 42." },
      );
    const settings = (key: string) => ({
      llm_model: "openai/fake-model",
      llm_base_url: llm.url,
      llm_api_key: key,
    });
    const expectConversation = (out: ClientOutput, tag: string) => {
      expect(out.firstReply).toBe(`Done: hello from ${tag}.`);
      expect(out.observation).toContain(`hello-${tag}`);
      expect(out.bash).toMatchObject({ exit_code: 0, stdout: "42\n" });
      expect(out.secondReply).toBe("answer.txt holds 42.");
      expect(out.secondObservation).toContain("42");
      expect(out.userMessages).toEqual([FIRST, SECOND]);
      expect(out.storedMessages).toBe(4);
      expect(out.eventKinds).toContain("ActionEvent");
    };

    it("over plain HTTP: the UI's flow needs only the service's address", async () => {
      const t = await startTestApp({ host: ns.hostAddress });
      // The scripted model is on this machine's loopback: allowed to sandboxes (a server's SANDBOX_HOST_PORTS).
      t.runtime.reachHost?.(llm.url);
      try {
        script("http");
        const out = await runClient(t, {
          apiKey: await t.keyFor("alice"),
          settings: settings("sk-http"),
          firstMessage: FIRST,
          secondMessage: SECOND,
          agent: true,
          bashCommand: "cat answer.txt",
        });
        expectConversation(out, "http");
        expect(llm.requests.at(-1)?.authorization).toBe("Bearer sk-http");
        await expectOnlyTheService(t, out);
      } finally {
        await t.close();
      }
    }, 180_000);

    it("over TLS: https and wss to the service's address, with its certificate trusted by the client", async () => {
      // A certificate for the link address (a self-signed one is its own CA for the client).
      const cert = join(dir, "cert.pem");
      const key = join(dir, "key.pem");
      execFileSync(
        "openssl",
        [
          "req",
          "-x509",
          "-newkey",
          "ec",
          "-pkeyopt",
          "ec_paramgen_curve:prime256v1",
          "-nodes",
          "-days",
          "1",
          "-subj",
          `/CN=${ns.hostAddress}`,
          "-addext",
          `subjectAltName=IP:${ns.hostAddress}`,
          "-keyout",
          key,
          "-out",
          cert,
        ],
        { stdio: "pipe" },
      );
      const t = await startTestApp({
        host: ns.hostAddress,
        tls: { cert: readFileSync(cert), key: readFileSync(key) },
      });
      t.runtime.reachHost?.(llm.url);
      try {
        expect(t.url).toMatch(/^https:/);
        // The client verifies the certificate: without it as a CA, the service's address is refused.
        const untrusted = await ns.run(
          [
            process.execPath,
            "-e",
            "fetch(process.argv[1]).then(() => console.log('trusted'), (e) => console.log(e.cause?.code ?? e.message))",
            `${t.url}/api/options/config`,
          ],
          { env: trusting(undefined) },
        );
        expect(untrusted.stdout.trim()).toBe("DEPTH_ZERO_SELF_SIGNED_CERT");
        script("tls");
        const out = await runClient(
          t,
          {
            apiKey: await t.keyFor("alice"),
            settings: settings("sk-tls"),
            firstMessage: FIRST,
            secondMessage: SECOND,
            agent: true,
            bashCommand: "cat answer.txt",
          },
          trusting(cert),
        );
        expectConversation(out, "tls");
        expect(llm.requests.at(-1)?.authorization).toBe("Bearer sk-tls");
        await expectOnlyTheService(t, out);
      } finally {
        await t.close();
      }
    }, 180_000);
  },
);

// The Docker runtime with the agent-server stand-in image, as test/e2e/agent-server-docker.test.ts runs it (host
// network, the agent on 127.0.0.1). The stand-in runs no model: a turn is over when it has recorded the user's
// message (which it then publishes on the socket).
const docker = dockerFromEnv();
const found = nsSkip === null ? await findAgentServerImage(docker) : "no network namespace";
const dockerSkip = nsSkip ?? (typeof found === "string" ? found : null);
if (dockerSkip && nsSkip === null) console.log(`other-host Docker test skipped: ${dockerSkip}`);

describe.skipIf(dockerSkip !== null)(
  `a conversation from another host, agent-server image on Docker${dockerSkip ? ` (skipped: ${dockerSkip})` : ""}`,
  () => {
    const runId = randomBytes(4).toString("hex");
    let runtime: DockerRuntime;
    afterAll(async () => {
      await runtime?.removeAll();
    });

    it("the UI's flow needs only the service's address", async () => {
      const image = typeof found === "string" ? "unused" : found.image;
      runtime = createDockerRuntime({
        docker,
        network: "host",
        labels: { "workspace.test-run": runId },
        stopTimeoutSeconds: 2,
      });
      const t = await startTestApp({
        host: ns.hostAddress,
        runtime,
        specs: defaultSpecs({ kind: "docker", image }, new Date()),
        sweepIntervalMs: 0,
      });
      try {
        const out = await runClient(t, {
          apiKey: await t.keyFor("alice"),
          settings: { llm_model: "anthropic/claude-sonnet-4-5", llm_api_key: "sk-docker-0123456789" },
          firstMessage: FIRST,
          secondMessage: SECOND,
          agent: false,
          bashCommand: "echo from-the-container; id -un",
        });
        expect(out.bash).toMatchObject({ exit_code: 0, stdout: "from-the-container\nopenhands\n" });
        expect(out.userMessages).toEqual([FIRST, SECOND]);
        expect(out.storedMessages).toBe(2);
        expect(out.eventKinds.slice(0, 2)).toEqual(["ConversationStateUpdateEvent", "SystemPromptEvent"]);
        await expectOnlyTheService(t, out);
      } finally {
        await t.close();
      }
    }, 180_000);
  },
);

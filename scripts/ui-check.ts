/**
 * The real-browser check of a conversation in the OpenHands UI on the embedded default (a manual check: CI cannot
 * fetch the UI). It starts a scripted fake model server (test/helpers/fake-llm.ts), the built service (`dist/`, as
 * `npm start` runs it: process runtime, built-in agent, SQLite in a fresh DATA_DIR) serving the built UI from
 * UI_DIR, and Debian's Chromium driven by playwright-core; then, as a person would: signs in on the sign-in page,
 * sets the model, base URL and key in the LLM settings (advanced), starts a conversation from the home page, types
 * a task, and waits for the agent's reply and the terminal output on the conversation page; at the end picks a local
 * repository (LOCAL_REPOSITORY_ROOTS) and its branch on the home screen, checks its Changes tab, and logs out from
 * the user menu. It fails when the page shows "Disconnected", the reply or the output does not appear, the agent's
 * websocket never opens, or the local repository, its change or the sign-in page after Logout is not shown.
 *
 * Writes to OUT_DIR (default a new folder under /tmp): screenshots of each step (`NN-step.png`), `requests.json`
 * (every HTTP call the page made to the service and to the agent, with status and JSON answer, and every websocket
 * frame, in order) and `service.log`. See docs/testing.md for fetching and building the UI.
 *
 *   UI_DIR=/tmp/ohui/frontend/build PLAYWRIGHT_CORE=/tmp/ohui/pw/node_modules/playwright-core \
 *     npm run build && node scripts/ui-check.ts
 *
 * Environment: UI_DIR (required), PLAYWRIGHT_CORE (the playwright-core package folder; default
 * /tmp/ohui/pw/node_modules/playwright-core), CHROMIUM (default /usr/bin/chromium), OUT_DIR, V1=1 (turn on the
 * UI's USE_V1_CONVERSATION_API flag in localStorage: the start-task path instead of the legacy POST), REMOTE=1 (the
 * browser on a second host), RUNTIME=docker (sandboxes as containers of DOCKER_IMAGE on Docker's bridge; start the
 * engine with `source .ci/docker.sh && docker_up`).
 */
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { BUILTIN_AGENT_COMMAND } from "../agent/shared/builtin-agent.ts";
import { startFakeLlm } from "../test/helpers/fake-llm.ts";
import { makeNetNs } from "../test/helpers/netns.ts";
import { BUILT_CLI, type ServerProcess, spawnServer } from "../test/helpers/server-process.ts";

const root = resolve(import.meta.dirname, "..");
const uiDir = process.env.UI_DIR;
if (!uiDir || !existsSync(join(uiDir, "index.html"))) {
  console.error(
    "UI_DIR must name the built OpenHands frontend (the folder holding index.html); see docs/testing.md",
  );
  process.exit(2);
}
const playwrightDir = process.env.PLAYWRIGHT_CORE ?? "/tmp/ohui/pw/node_modules/playwright-core";
const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const outDir = process.env.OUT_DIR ?? mkdtempSync(join(tmpdir(), "ui-check-"));
mkdirSync(outDir, { recursive: true });
if (!existsSync(join(root, "dist/src/cli/main.js"))) {
  console.error("dist/ is missing: run `npm run build` first");
  process.exit(2);
}

// playwright-core lives outside the project (not a dependency): loaded from its folder.
const { chromium } = createRequire(join(playwrightDir, "package.json"))(playwrightDir);

const TASK = "Print a greeting in the terminal";
const TERMINAL_OUTPUT = "hello-from-the-terminal";
const REPLY = "The greeting was printed.";
const TASK_2 = "Now write it to a file";
const REPLY_2 = "I wrote greeting.txt.";
const TASK_3 = "Take your time";
const REPLY_3 = "Resumed and done.";
const REPLY_4 = "Back again.";
const TASK_C = "Run it only if I agree";
const REPLY_C = "Confirmed and done.";
const REPLY_U = "I read notes.txt.";

async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => res(typeof a === "object" && a !== null ? a.port : 0));
    });
  });
}

interface Recorded {
  t: number;
  type: "http" | "ws-open" | "ws-sent" | "ws-received" | "ws-close";
  [k: string]: unknown;
}

const log: string[] = [];
const step = (text: string): void => {
  const line = `[${new Date().toISOString().slice(11, 23)}] ${text}`;
  log.push(line);
  console.log(line);
};

const llm = await startFakeLlm();
// One terminal call, then the final answer (then, for any later turn, a plain answer).
llm.script(
  { toolCalls: [{ name: "terminal", arguments: { command: `echo ${TERMINAL_OUTPUT}` } }] },
  { content: REPLY },
  {
    toolCalls: [
      {
        name: "file_editor",
        arguments: { command: "create", path: "/workspace/project/greeting.txt", file_text: "hello\n" },
      },
    ],
  },
  { content: REPLY_2 },
  // Third turn: the model takes 3 s, and the user pauses meanwhile; play resumes.
  { toolCalls: [{ name: "terminal", arguments: { command: "echo after-pause" } }], delayMs: 3000 },
  { content: REPLY_3 },
  // After the restart: a model failure (shown as an error), then the next message answered.
  { status: 401, error: "Incorrect API key provided" },
  { content: REPLY_4 },
  // A second conversation with confirmation mode on: the command waits for the user's yes.
  { toolCalls: [{ name: "terminal", arguments: { command: "echo confirmed-run" } }] },
  { content: REPLY_C },
  // An uploaded file (the UI names it /workspace/<name> in the message), read with the file editor.
  { toolCalls: [{ name: "file_editor", arguments: { command: "view", path: "/workspace/notes.txt" } }] },
  { content: REPLY_U },
);

const port = await freePort();
const grpcPort = await freePort();
const dataDir = mkdtempSync(join(tmpdir(), "ui-check-data-"));
// LOCAL_REPOSITORY_ROOTS: one repository with a working tree (main, and a branch feature), readable by the
// sandboxes' own uids.
const reposDir = mkdtempSync(join(tmpdir(), "ui-check-repos-"));
chmodSync(reposDir, 0o755);
{
  const demo = join(reposDir, "demo");
  const git = (...args: string[]) => spawnSync("git", ["-C", demo, ...args], { stdio: "ignore" });
  mkdirSync(demo, { mode: 0o755 });
  git("init", "-q", "-b", "main");
  writeFileSync(join(demo, "README.md"), "# demo\n");
  git("add", ".");
  git("-c", "user.name=ui-check", "-c", "user.email=ui-check@example.com", "commit", "-q", "-m", "initial");
  git("branch", "feature");
}
// REMOTE=1: the browser runs on a second host (a network namespace joined by a veth pair, test/helpers/netns.ts)
// that reaches the service only at its address on that link, as a person's own machine reaches a team's server.
const remote = process.env.REMOTE === "1" ? makeNetNs() : null;
if (remote !== null && "reason" in remote) {
  console.error(`REMOTE=1 needs a network namespace: ${remote.reason}`);
  process.exit(2);
}
const serviceHost = remote?.hostAddress ?? "127.0.0.1";
// RUNTIME=docker: sandboxes are containers of DOCKER_IMAGE (default the CI's built-in agent image,
// WORKSPACE_TEST_DOCKER_IMAGE from .ci/docker.sh) on Docker's bridge network.
const docker = process.env.RUNTIME === "docker";
const dockerImage = process.env.DOCKER_IMAGE ?? process.env.WORKSPACE_TEST_DOCKER_IMAGE ?? "";
const specsFile = join(mkdtempSync(join(tmpdir(), "ui-check-specs-")), "specs.json");
writeFileSync(
  specsFile,
  JSON.stringify([{ id: dockerImage, command: [BUILTIN_AGENT_COMMAND], working_dir: "/workspace/project" }]),
);
const base = `http://${serviceHost}:${port}`;
/** Every start of the service, in order: what they printed makes service.log. */
const services: ServerProcess[] = [];
const serviceOut = (): string => services.map((s) => s.output()).join("");
/** Starts the service as `npm start` runs it (the built dist/), on the same port and DATA_DIR each time. */
function startService(): ServerProcess {
  const service = spawnServer({
    entry: BUILT_CLI,
    cwd: root,
    env: {
      ...process.env,
      // On Docker's bridge, containers post their webhooks to the host gateway: the service listens there too.
      HOST: docker ? "0.0.0.0" : serviceHost,
      ...(docker
        ? {
            SANDBOX_RUNTIME: "docker",
            DOCKER_IMAGE: dockerImage,
            // The built-in agent's image runs its own command (the agent-server's flags are for its image).
            SANDBOX_SPECS_FILE: specsFile,
            // No container left warm for a next server when the check ends.
            SANDBOX_WARM_CONTAINERS: "0",
          }
        : {}),
      PORT: String(port),
      GRPC_PORT: String(grpcPort),
      DATA_DIR: dataDir,
      UI_DIR: uiDir,
      LOCAL_REPOSITORY_ROOTS: reposDir,
      // The fake model on this machine's loopback, as a person's Ollama: sandboxes in networks of their own reach
      // it at their gateway.
      SANDBOX_HOST_PORTS: new URL(llm.url).port,
      LOG_LEVEL: process.env.LOG_LEVEL ?? "info",
    },
  });
  services.push(service);
  return service;
}
/** Resolves once the service answers /health. */
async function serviceUp(): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      if ((await fetch(`${base}/health`)).ok) return;
    } catch {
      // not yet
    }
    if (Date.now() > deadline) throw new Error(`the service did not come up:\n${serviceOut().slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
let service = startService();

/**
 * The sandboxes outlive the service by design (its agents are found again after a restart): at the end every process
 * of this run (its command line or working directory in this run's DATA_DIR: the agents, under bubblewrap or not,
 * and what they started) is killed, its workspaces unmounted and the folder removed.
 */
function removeRunProcesses(): number {
  let killed = 0;
  for (const name of readdirSync("/proc")) {
    const pid = Number(name);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    let ours = false;
    try {
      ours = readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(dataDir);
    } catch {
      continue;
    }
    try {
      ours ||= readlinkSync(`/proc/${pid}/cwd`).startsWith(dataDir);
    } catch {
      // gone, or not ours to read
    }
    if (!ours) continue;
    try {
      process.kill(pid, "SIGKILL");
      killed++;
    } catch {
      // already gone
    }
  }
  return killed;
}

/** Workspaces the service loop-mounted (as root it gives each its own file system) and left mounted: unmounted. */
function unmountRunDisks(): void {
  const points = readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((line) => line.split(" ")[4] ?? "")
    .filter((point) => point.startsWith(`${dataDir}/`));
  for (const point of points) spawnSync("umount", ["-l", point], { stdio: "ignore" });
}

let browser: { close(): Promise<void> } | undefined;
let failed: string | null = null;
const records: Recorded[] = [];
const t0 = Date.now();
try {
  const key = await new Promise<string>((res, rej) => {
    const deadline = setTimeout(() => rej(new Error(`service printed no key:\n${serviceOut()}`)), 30_000);
    const check = (): void => {
      const m = /X-Session-API-Key: (\S+)/.exec(serviceOut());
      if (m?.[1]) {
        clearTimeout(deadline);
        res(m[1]);
      } else setTimeout(check, 100);
    };
    check();
  });
  step(`service on ${base}, data in ${dataDir}, fake model at ${llm.url}`);

  // On the second host: Chromium started inside the namespace (playwright talks to it over a pipe).
  const wrapper = join(outDir, "chromium-in-netns.sh");
  if (remote !== null)
    writeFileSync(wrapper, `#!/bin/sh\nexec ip netns exec ${remote.name} ${chromiumPath} "$@"\n`, {
      mode: 0o755,
    });
  step(remote === null ? "browser on this machine" : `browser on the second host ${remote.address}`);
  browser = await chromium.launch({
    executablePath: remote === null ? chromiumPath : wrapper,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  // biome-ignore lint/suspicious/noExplicitAny: playwright-core is loaded untyped from outside the project
  const context = await (browser as any).newContext({ viewport: { width: 1400, height: 900 } });
  if (process.env.V1 === "1")
    await context.addInitScript(() => {
      (
        globalThis as unknown as { localStorage: { setItem(k: string, v: string): void } }
      ).localStorage.setItem("FEATURE_USE_V1_CONVERSATION_API", "true");
    });
  const page = await context.newPage();
  let shot = 0;
  const screenshot = async (name: string): Promise<void> => {
    shot++;
    await page.screenshot({ path: join(outDir, `${String(shot).padStart(2, "0")}-${name}.png`) });
  };

  // Record every call to the service's API and to agents (anything not a static asset of the UI).
  const isApi = (url: string): boolean => {
    const u = new URL(url);
    if (u.origin === base) return u.pathname.startsWith("/api/") || u.pathname.startsWith("/sockets/");
    return u.hostname === "127.0.0.1" || u.hostname === "localhost";
  };
  page.on("console", (m: { type(): string; text(): string }) => {
    if (m.type() === "error" || m.type() === "warning")
      step(`console ${m.type()}: ${m.text().slice(0, 300)}`);
  });
  page.on("pageerror", (e: Error) => step(`page error: ${e.message}`));
  page.on(
    "response",
    async (r: {
      url(): string;
      status(): number;
      request(): { method(): string; postData(): string | null; headers(): Record<string, string> };
      headers(): Record<string, string>;
      text(): Promise<string>;
    }) => {
      if (!isApi(r.url())) return;
      const rec: Recorded = {
        t: Date.now() - t0,
        type: "http",
        method: r.request().method(),
        url: r.url().replace(base, ""),
        status: r.status(),
        request: r.request().postData(),
      };
      records.push(rec);
      try {
        const text = await r.text();
        try {
          rec.response = JSON.parse(text);
        } catch {
          rec.response = text.slice(0, 500);
        }
      } catch {
        rec.response = null;
      }
    },
  );
  page.on(
    "requestfailed",
    (r: { url(): string; method(): string; failure(): { errorText: string } | null }) => {
      if (isApi(r.url())) {
        records.push({
          t: Date.now() - t0,
          type: "http",
          method: r.method(),
          url: r.url(),
          failed: r.failure()?.errorText,
        });
        step(`request failed: ${r.method()} ${r.url()} ${r.failure()?.errorText}`);
      }
    },
  );
  page.on(
    "websocket",
    (ws: { url(): string; on(e: string, f: (x: { payload: string | Buffer }) => void): void }) => {
      const url = ws.url();
      records.push({ t: Date.now() - t0, type: "ws-open", url });
      step(`websocket ${url.replace(/session_api_key=[^&]+/, "session_api_key=…")}`);
      ws.on("framesent", (f) =>
        records.push({ t: Date.now() - t0, type: "ws-sent", url, payload: String(f.payload) }),
      );
      ws.on("framereceived", (f) =>
        records.push({ t: Date.now() - t0, type: "ws-received", url, payload: String(f.payload) }),
      );
      ws.on("close", () => records.push({ t: Date.now() - t0, type: "ws-close", url }));
    },
  );

  // 1. Sign in on the sign-in page.
  await page.goto(`${base}/`);
  await page.waitForSelector("#key", { timeout: 15_000 });
  await screenshot("sign-in");
  await page.fill("#key", key);
  await page.click("button[type=submit]");
  await page.waitForURL(
    (u: URL) => !u.pathname.startsWith("/sign-in") && !u.pathname.startsWith("/api/auth"),
    {
      timeout: 15_000,
    },
  );
  step(`signed in, at ${page.url()}`);

  // 2. LLM settings, advanced: model, base URL, key.
  await page.goto(`${base}/settings`);
  await page.waitForSelector('[data-testid="llm-settings-screen"]', { timeout: 30_000 });
  // A first run without settings may open the AI-provider modal; the settings page itself is what we fill.
  // The switch is a hidden checkbox inside its label: the label takes the click.
  const advanced = page.locator('label:has([data-testid="advanced-settings-switch"])');
  if ((await page.locator('[data-testid="llm-settings-form-advanced"]').count()) === 0)
    await advanced.click();
  await page.waitForSelector('[data-testid="llm-custom-model-input"]');
  await page.fill('[data-testid="llm-custom-model-input"]', "openai/gpt-4o");
  await page.fill('[data-testid="base-url-input"]', llm.url);
  await page.fill('[data-testid="llm-api-key-input"]', "sk-fake-ui-check");
  await screenshot("llm-settings");
  const saved = page.waitForResponse(
    (r: { url(): string; request(): { method(): string } }) =>
      r.url().endsWith("/api/settings") && r.request().method() === "POST",
    { timeout: 15_000 },
  );
  await page.click('[data-testid="submit-button"]');
  await saved;
  step("LLM settings saved");
  await page.waitForTimeout(500);
  await screenshot("llm-settings-saved");

  // 3. New conversation from the home page.
  await page.goto(`${base}/`);
  const launch = page.locator('[data-testid="launch-new-conversation-button"]').first();
  await launch.waitFor({ timeout: 30_000 });
  await screenshot("home");
  // A first visit asks for analytics consent: declined, as a person might.
  const consent = page.locator('[data-testid="user-capture-consent-form"]');
  if (await consent.isVisible().catch(() => false)) {
    const box = consent.locator("input[type=checkbox]");
    if (await box.isChecked().catch(() => false)) await box.uncheck({ force: true });
    await page.click('[data-testid="confirm-preferences"]');
    await consent.waitFor({ state: "detached", timeout: 10_000 });
    step("analytics consent declined");
  }
  await launch.click();
  await page.waitForURL(/\/conversations\/[0-9a-f-]+/, { timeout: 60_000 });
  step(`conversation page ${page.url()}`);

  // 4. Type the task once the chat box takes input.
  const input = page.locator('[data-testid="chat-input"]');
  await input.waitFor({ timeout: 60_000 });
  await page.waitForTimeout(1000);
  await screenshot("conversation-opened");
  const readyDeadline = Date.now() + 90_000;
  // The send button is enabled once the agent is connected.
  for (;;) {
    await input.click();
    await input.fill(TASK);
    const disabled = await page
      .locator('[data-testid="submit-button"]')
      .isDisabled()
      .catch(() => true);
    if (!disabled) break;
    if (Date.now() > readyDeadline) throw new Error("the chat box never became ready to send");
    await page.waitForTimeout(1000);
  }
  await page.click('[data-testid="submit-button"]');
  step("task sent");

  // 5. The reply and the terminal output.
  await page.getByText(REPLY).first().waitFor({ timeout: 60_000 });
  step("agent reply shown");
  await screenshot("reply");
  const bodyText: string = await page.locator("body").innerText();
  if (/Disconnected/i.test(bodyText)) throw new Error('the page shows "Disconnected"');
  // The terminal tab (xterm) shows the command's output; the chat shows it in the expanded observation too.
  await page.locator('[aria-label^="Terminal"]').first().click();
  await page.waitForTimeout(1500);
  await screenshot("terminal");
  const xterm: string = await page
    .locator(".xterm-rows")
    .first()
    .innerText()
    .catch(() => "");
  step(`terminal shows: ${JSON.stringify(xterm.slice(0, 200))}`);
  if (!xterm.includes(TERMINAL_OUTPUT)) throw new Error("the terminal does not show the command's output");

  // 6. A second message (a file edit), typed once the agent has finished.
  await input.click();
  await input.fill(TASK_2);
  await page.click('[data-testid="submit-button"]');
  await page.getByText(REPLY_2).first().waitFor({ timeout: 60_000 });
  step("second reply shown");
  // The UI shows a file edit as done whatever its observation says (it reads a field the SDK does not have):
  // the service's copy of the events tells whether the file was written.
  const conversationIdNow = new URL(page.url()).pathname.split("/").pop() as string;
  const observed = await (
    await page.request.get(
      `${base}/api/v1/events/search?conversation_id__eq=${conversationIdNow}&kind__eq=ObservationEvent`,
    )
  ).json();
  const edit = observed.items.find(
    (e: { observation: { kind: string } }) => e.observation.kind === "FileEditorObservation",
  );
  if (edit === undefined || edit.observation.is_error !== false)
    throw new Error(`the file edit failed: ${JSON.stringify(edit?.observation.content ?? observed)}`);
  await screenshot("second-reply");

  // 7. The service named the conversation after the first message (the UI polls the title every 30 s; asked here).
  const conversationId = new URL(page.url()).pathname.split("/").pop() as string;
  const info = await (await page.request.get(`${base}/api/conversations/${conversationId}`)).json();
  step(`title: ${JSON.stringify(info.title)}`);
  if (info.title !== TASK)
    throw new Error(`the conversation is titled ${JSON.stringify(info.title)}, not the task`);

  // 8. Reload: the page reconnects (resend_all) and shows the whole conversation again.
  await page.reload();
  await page.getByText(REPLY_2).first().waitFor({ timeout: 60_000 });
  await page.getByText(REPLY).first().waitFor({ timeout: 10_000 });
  await page.waitForTimeout(1500);
  await screenshot("reloaded");
  const reloaded: string = await page.locator("body").innerText();
  if (/Disconnected/i.test(reloaded)) throw new Error('the reloaded page shows "Disconnected"');

  // 9. Pause while the model thinks, then resume with the play button.
  await input.click();
  await input.fill(TASK_3);
  await page.click('[data-testid="submit-button"]');
  await page.locator('[data-testid="stop-button"]').waitFor({ timeout: 10_000 });
  await page.waitForTimeout(500);
  await page.click('[data-testid="stop-button"]');
  step("pause clicked");
  await page.locator('[data-testid="play-button"]').waitFor({ timeout: 10_000 });
  await screenshot("paused");
  await page.waitForTimeout(3500); // the model's answer to the paused call arrives meanwhile
  await screenshot("paused-after-answer");
  await page.click('[data-testid="play-button"]');
  step("play clicked");
  await page.getByText(REPLY_3).first().waitFor({ timeout: 30_000 });
  // The answer of the call in flight at the pause was kept and its command ran on resume.
  await page.getByText("echo after-pause").first().waitFor({ timeout: 5_000 });
  await page.waitForTimeout(500);
  await screenshot("resumed");

  // 10. The service restarts (as `npm start` again): the page reloaded shows the conversation's history.
  await service.stop();
  service = startService();
  await serviceUp();
  step("service restarted");
  await page.reload();
  await page.getByText(REPLY_3).first().waitFor({ timeout: 60_000 });
  await page.waitForTimeout(1000);
  await screenshot("after-restart");
  const afterRestart: string = await page.locator("body").innerText();
  if (/Disconnected/i.test(afterRestart)) throw new Error('after the restart the page shows "Disconnected"');
  step("after the restart the conversation is shown again");

  // 11. A model failure is shown (the error banner), and the next message is answered.
  await input.click();
  await input.fill("Trigger a model failure");
  await page.click('[data-testid="submit-button"]');
  // The chat shows the ConversationErrorEvent as a collapsed error line (its detail inside) and the banner above the
  // input shows the detail.
  await page
    .getByText(/status 401/)
    .first()
    .waitFor({ state: "attached", timeout: 30_000 });
  await page.waitForTimeout(1000);
  await screenshot("model-error");
  step("the model's 401 is shown");
  await input.click();
  await input.fill("Try again");
  await page.click('[data-testid="submit-button"]');
  await page.getByText(REPLY_4).first().waitFor({ timeout: 30_000 });
  step("the next message is answered after the failure");

  // 12. Confirmation mode: switched on in the LLM settings, a new conversation asks before running the command.
  await page.goto(`${base}/settings`);
  await page.waitForSelector('[data-testid="llm-settings-screen"]', { timeout: 30_000 });
  if ((await page.locator('[data-testid="llm-settings-form-advanced"]').count()) === 0)
    await advanced.click();
  await page.locator('label:has([data-testid="enable-confirmation-mode-switch"])').click();
  const savedAgain = page.waitForResponse(
    (r: { url(): string; request(): { method(): string } }) =>
      r.url().endsWith("/api/settings") && r.request().method() === "POST",
    { timeout: 15_000 },
  );
  await page.click('[data-testid="submit-button"]');
  await savedAgain;
  step("confirmation mode saved");
  await page.goto(`${base}/`);
  await page.locator('[data-testid="launch-new-conversation-button"]').first().click();
  await page.waitForURL(
    (u: URL) => u.pathname.startsWith("/conversations/") && !u.pathname.endsWith(conversationId),
    {
      timeout: 60_000,
    },
  );
  const input2 = page.locator('[data-testid="chat-input"]');
  await input2.waitFor({ timeout: 60_000 });
  for (const deadline = Date.now() + 90_000; ; ) {
    await input2.click();
    await input2.fill(TASK_C);
    if (
      !(await page
        .locator('[data-testid="submit-button"]')
        .isDisabled()
        .catch(() => true))
    )
      break;
    if (Date.now() > deadline) throw new Error("the second conversation's chat box never became ready");
    await page.waitForTimeout(1000);
  }
  await page.click('[data-testid="submit-button"]');
  await page.locator('[data-testid="action-confirm-button"]').waitFor({ timeout: 30_000 });
  await screenshot("awaiting-confirmation");
  step("the action waits for confirmation");
  await page.click('[data-testid="action-confirm-button"]');
  await page.getByText(REPLY_C).first().waitFor({ timeout: 30_000 });
  await page.waitForTimeout(500);
  await screenshot("confirmed");
  step("confirmed: the command ran and the agent answered");

  // 13. A file attached with the paperclip: uploaded to the agent, named in the message, read by the agent.
  await page
    .locator('input[type="file"]')
    .first()
    .setInputFiles({
      name: "notes.txt",
      mimeType: "text/plain",
      buffer: Buffer.from("uploaded-notes-content\n"),
    });
  await input2.click();
  await input2.fill("Read the file I attached");
  const uploaded = page.waitForResponse((r: { url(): string }) => r.url().includes("/api/file/upload/"), {
    timeout: 15_000,
  });
  await page.click('[data-testid="submit-button"]');
  const upload = await uploaded;
  step(`upload answered ${upload.status()}`);
  if (upload.status() !== 200) throw new Error(`the upload answered ${upload.status()}`);
  await page.locator('[data-testid="action-confirm-button"]').waitFor({ timeout: 30_000 });
  await page.click('[data-testid="action-confirm-button"]');
  await page.getByText(REPLY_U).first().waitFor({ timeout: 30_000 });
  const secondId = new URL(page.url()).pathname.split("/").pop() as string;
  // The service's copy of the events (the webhook posts them in batches): the view's observation.
  let view: { is_error?: boolean; content?: unknown; kind?: string } | undefined;
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await page.waitForTimeout(250)) {
    const viewed = await (
      await page.request.get(
        `${base}/api/v1/events/search?conversation_id__eq=${secondId}&kind__eq=ObservationEvent`,
      )
    ).json();
    view = viewed.items.at(-1)?.observation;
    if (view?.kind === "FileEditorObservation") break;
  }
  if (view?.is_error !== false || !JSON.stringify(view.content).includes("uploaded-notes-content"))
    throw new Error(`the agent could not read the upload: ${JSON.stringify(view)}`);
  await screenshot("upload-read");
  step("the uploaded file was read by the agent");

  // 14. The conversation panel lists both conversations (a screenshot to look at; the statuses come from the
  // agents' webhooks).
  await page.locator('[data-testid="toggle-conversation-panel"]').first().click();
  await page.waitForTimeout(1500);
  await screenshot("conversation-panel");

  // 15. A local repository from the home screen's picker (this user has no git provider token): typed, picked as
  // @local/demo, its branch feature picked, launched; the chips name it, and an edit in its clone shows up in the
  // Changes tab.
  await page.goto(`${base}/`);
  const repoInput = page.locator('[data-testid="git-repo-dropdown"]');
  await repoInput.waitFor({ timeout: 30_000 });
  await repoInput.click();
  await repoInput.fill("demo");
  await page
    .locator('[data-testid="git-repo-dropdown-menu"]')
    .getByText("@local/demo", { exact: true })
    .first()
    .click({ timeout: 30_000 });
  const branchInput = page.locator('[data-testid="git-branch-dropdown-input"]');
  // The branch dropdown selects the repository's main branch by itself.
  for (const deadline = Date.now() + 30_000; (await branchInput.inputValue()) !== "main"; ) {
    if (Date.now() > deadline) throw new Error("the branch dropdown did not select main");
    await page.waitForTimeout(200);
  }
  await branchInput.click();
  await branchInput.fill("feat");
  await page
    .locator('[data-testid="git-branch-dropdown-menu"]')
    .getByText("feature", { exact: true })
    .first()
    .click({ timeout: 30_000 });
  await screenshot("local-repository-picked");
  step("local repository and branch picked");
  await page.click('[data-testid="repo-launch-button"]');
  await page.waitForURL(/\/conversations\/[0-9a-f]{32}$/, { timeout: 90_000 });
  const localId = new URL(page.url()).pathname.split("/").pop() as string;
  await page.getByText("@local/demo").first().waitFor({ timeout: 60_000 });
  let localInfo: { status?: string; session_api_key?: string | null } = {};
  for (const deadline = Date.now() + 60_000; localInfo.status !== "RUNNING" || !localInfo.session_api_key; ) {
    if (Date.now() > deadline)
      throw new Error(`the local repository's conversation: ${JSON.stringify(localInfo)}`);
    await page.waitForTimeout(500);
    localInfo = await (await page.request.get(`${base}/api/conversations/${localId}`)).json();
  }
  // The edit, as the agent's tools make it (its bash, through the service with the sandbox's key).
  const edited = await page.request.post(`${base}/api/bash/execute_bash_command`, {
    headers: { "x-session-api-key": localInfo.session_api_key, "content-type": "application/json" },
    data: { command: "cd demo && git rev-parse --abbrev-ref HEAD && echo from-the-agent >> README.md" },
  });
  const editOut = await edited.json();
  if (editOut.exit_code !== 0 || editOut.stdout !== "feature\n")
    throw new Error(`the edit in the clone: ${JSON.stringify(editOut)}`);
  await page.reload();
  await page.locator('[aria-label^="Changes"]').first().click({ timeout: 30_000 });
  await page.getByText("README.md").first().waitFor({ timeout: 30_000 });
  await screenshot("local-repository-changes");
  step("the local repository's conversation shows its edit in the Changes tab");

  // 16. Logout from the user menu: the session ends and the reloaded page is the sign-in page.
  await page.locator('[data-testid="user-avatar"]').first().click();
  await page.locator('[data-testid="account-settings-context-menu"]').getByText("Logout").click();
  await page.waitForURL((u: URL) => u.pathname === "/sign-in", { timeout: 30_000 });
  await page.waitForSelector("#key", { timeout: 15_000 });
  await screenshot("logged-out");
  step(`Logout: ${page.url()}`);
  step(
    "PASS: the replies and the terminal output are shown, no Disconnected, the history comes back on reload",
  );
} catch (e: unknown) {
  failed = e instanceof Error ? (e.stack ?? e.message) : String(e);
  step(`FAIL: ${failed}`);
} finally {
  writeFileSync(join(outDir, "requests.json"), JSON.stringify(records, null, 1));
  writeFileSync(join(outDir, "service.log"), serviceOut());
  writeFileSync(join(outDir, "steps.log"), log.join("\n"));
  writeFileSync(join(outDir, "llm-requests.json"), JSON.stringify(llm.requests, null, 1));
  await browser?.close().catch(() => {});
  await service.stop();
  if (docker && process.env.KEEP !== "1")
    spawnSync(process.execPath, [join(root, "dist/src/cli/main.js"), "sandboxes", "purge"], {
      cwd: root,
      env: {
        ...process.env,
        DATA_DIR: dataDir,
        HOST: "0.0.0.0",
        SANDBOX_RUNTIME: "docker",
        DOCKER_IMAGE: dockerImage,
        SANDBOX_SPECS_FILE: specsFile,
      },
      stdio: "inherit",
      timeout: 60_000,
    });
  const killed = removeRunProcesses();
  if (killed > 0) console.log(`stopped ${killed} sandbox processes of this run`);
  await new Promise((r) => setTimeout(r, 500));
  unmountRunDisks();
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(reposDir, { recursive: true, force: true });
  await llm.close();
  remote?.remove();
  console.log(`screenshots, requests.json, service.log in ${outDir}`);
}
process.exit(failed === null ? 0 : 1);

import { spawnSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OPENHANDS_UI_COMMIT } from "../../scripts/build-ui.ts";
import { DEFAULT_MODELS } from "../../src/transports/rest/options-routes.ts";
import { Browser } from "../helpers/browser.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const root = join(import.meta.dirname, "..", "..");
const INDEX =
  "<!doctype html><html><head><script type=module src=/assets/app-abc123.js></script></head></html>";
const APP_JS = "console.log('app');";
let t: TestApp;
let checkout: string;
let ui: string;
let key: string;

beforeAll(async () => {
  // A fake frontend/build folder, as the OpenHands frontend's `npm run build` leaves it (its react-router config
  // moves build/client up into build/).
  checkout = mkdtempSync(join(tmpdir(), "aws-ui-"));
  ui = join(checkout, "frontend", "build");
  mkdirSync(join(ui, "assets"), { recursive: true });
  writeFileSync(join(ui, "index.html"), INDEX);
  writeFileSync(join(ui, "assets", "app-abc123.js"), APP_JS);
  writeFileSync(join(ui, "assets", "style-def456.css"), "body{}");
  writeFileSync(join(ui, "favicon.ico"), Buffer.from([0, 0, 1, 0]));
  writeFileSync(join(ui, ".env"), "SECRET=1");
  writeFileSync(join(ui, "other.html"), INDEX);
  // Files outside UI_DIR, reachable through symbolic links inside it: a linked folder and a linked file.
  mkdirSync(join(checkout, "outside"));
  writeFileSync(join(checkout, "outside", "secret.key"), "KEY");
  symlinkSync(join(checkout, "outside"), join(ui, "linked"));
  symlinkSync(join(checkout, "outside", "secret.key"), join(ui, "assets", "key.js"));
  // A link that stays inside is served.
  symlinkSync(join(ui, "assets", "app-abc123.js"), join(ui, "assets", "alias-abc123.js"));
  t = await startTestApp({
    web: {
      uiDir: ui,
      options: { models: ["zeta/model-b", "alpha/model-a"], agents: undefined, securityAnalyzers: ["llm"] },
    },
  });
  key = await t.keyFor("u");
});
afterAll(async () => {
  await t.close();
  rmSync(checkout, { recursive: true, force: true });
});

describe("UI_DIR", () => {
  it("serves index.html at / to a signed-in browser, never cached", async () => {
    const b = new Browser(t.url);
    await b.signIn(key);
    const r = await b.request("GET", "/");
    expect(r.status).toBe(200);
    expect(r.text).toBe(INDEX);
    expect(r.headers.get("content-type")).toMatch(/^text\/html/);
    expect(r.headers.get("cache-control")).toBe("no-cache");
  });

  it("sends a browser that is not signed in to the sign-in page, with where it was going", async () => {
    for (const path of ["/", "/settings/mcp"]) {
      const r = await fetch(`${t.url}${path}`, { redirect: "manual" });
      expect(r.status).toBe(302);
      expect(r.headers.get("location")).toBe(`/sign-in?next=${encodeURIComponent(path)}`);
    }
    // The header key counts as signed in too.
    expect((await call(t.url, key, "GET", "/settings")).text).toBe(INDEX);
  });

  it("SPA fallback: client-side routes get index.html; API paths, files and non-GET get JSON 404", async () => {
    const b = new Browser(t.url);
    await b.signIn(key);
    for (const path of ["/settings", "/settings/integrations", "/conversations/abc123?x=1", "/accept-tos"]) {
      const r = await b.request("GET", path);
      expect(r.status, path).toBe(200);
      expect(r.text).toBe(INDEX);
      expect(r.headers.get("cache-control")).toBe("no-cache");
    }
    for (const path of ["/api/nope", "/api/v1/nope", "/assets/missing-000.js", "/missing.png", "/.env"]) {
      const r = await b.request("GET", path);
      expect(r.status, path).toBe(404);
      expect(r.body).toEqual({ detail: "Not Found" });
    }
    const post = await b.request("POST", "/settings", {});
    expect(post.status).toBe(404);
    expect(post.body).toEqual({ detail: "Not Found" });
  });

  it("hashed assets: right content type and a year's immutable caching; other files an hour", async () => {
    const js = await fetch(`${t.url}/assets/app-abc123.js`);
    expect(js.status).toBe(200);
    expect(js.headers.get("content-type")).toMatch(/^(application|text)\/javascript/);
    expect(js.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    expect(await js.text()).toBe(APP_JS);
    const css = await fetch(`${t.url}/assets/style-def456.css`);
    expect(css.headers.get("content-type")).toMatch(/^text\/css/);
    const ico = await fetch(`${t.url}/favicon.ico`);
    expect(ico.status).toBe(200);
    expect(ico.headers.get("content-type")).toMatch(/icon/);
    expect(ico.headers.get("cache-control")).toBe("public, max-age=3600");
  });

  it("the API is unchanged: 401 JSON without a session, health and RPC paths as before", async () => {
    const r = await fetch(`${t.url}/api/settings`);
    expect(r.status).toBe(401);
    expect(await r.json()).toEqual({ detail: "Unauthorized" });
    expect((await call(t.url, undefined, "GET", "/alive")).body).toEqual({ status: "ok" });
    const rpc = await fetch(`${t.url}/workspace.v1.SettingsService/GetSettings`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(rpc.status).toBe(401);
  });

  it("every HTML entry is behind sign-in: /index.html redirects as / does; other pages are never served as files", async () => {
    for (const path of ["/index.html", "/INDEX.HTML", "/%69ndex.html", "/index.html?x=1"]) {
      const r = await fetch(`${t.url}${path}`, { redirect: "manual" });
      expect(r.status, path).not.toBe(200);
      expect(await r.text(), path).not.toBe(INDEX);
    }
    const r = await fetch(`${t.url}/index.html`, { redirect: "manual" });
    expect(r.status).toBe(302);
    expect(r.headers.get("location")).toBe(`/sign-in?next=${encodeURIComponent("/index.html")}`);
    const b = new Browser(t.url);
    await b.signIn(key);
    expect((await b.request("GET", "/index.html")).text).toBe(INDEX);
    expect((await b.request("GET", "/other.html")).status).toBe(404);
  });

  it("no file is served from outside UI_DIR through a symbolic link", async () => {
    for (const path of ["/linked/secret.key", "/assets/key.js"]) {
      const r = await call(t.url, key, "GET", path);
      expect(r.status, path).toBe(404);
      expect(r.text, path).not.toContain("KEY");
    }
    const inside = await fetch(`${t.url}/assets/alias-abc123.js`);
    expect(inside.status).toBe(200);
    expect(await inside.text()).toBe(APP_JS);
  });
});

describe("without UI_DIR: the page at /", () => {
  it("says where to sign in, where the API's documents are and how to add the UI; API misses stay JSON 404", async () => {
    const plain = await startTestApp();
    try {
      for (const path of ["/", "/index.html"]) {
        const r = await fetch(`${plain.url}${path}`, { redirect: "manual" });
        expect(r.status, path).toBe(200);
        expect(r.headers.get("content-type")).toMatch(/^text\/html/);
        expect(r.headers.get("cache-control")).toContain("no-store");
        const csp = r.headers.get("content-security-policy") ?? "";
        expect(csp).toContain("default-src 'none'");
        expect(csp).not.toContain("unsafe-inline");
        const html = await r.text();
        expect(html).not.toContain("<script");
        expect(html).toContain('href="/sign-in"');
        expect(html).toContain('href="/docs"');
        expect(html).toContain('href="/openapi.json"');
        expect(html).toContain("npm run ui -- &lt;OpenHands checkout or git URL&gt;");
        expect(html).toContain("UI_DIR=");
        expect(html).toContain("npm run cli -- chat");
      }
      const head = await fetch(`${plain.url}/`, { method: "HEAD" });
      expect(head.status).toBe(200);
      // What the page points at is there.
      expect((await fetch(`${plain.url}/sign-in`)).status).toBe(200);
      expect((await fetch(`${plain.url}/openapi.json`)).status).toBe(200);
      for (const path of ["/api/nope", "/api/v1/nope", "/settings", "/missing.png"]) {
        const r = await call(plain.url, undefined, "GET", path);
        expect(r.status, path).toBe(404);
        expect(r.body).toEqual({ detail: "Not Found" });
      }
      const post = await call(plain.url, undefined, "POST", "/", {});
      expect(post.status).toBe(404);
      expect(post.body).toEqual({ detail: "Not Found" });
    } finally {
      await plain.close();
    }
  });

  it("names the admin listener for the API's documents when ADMIN_PORT moves them", async () => {
    const admin = await startTestApp({ admin: { port: 0 } });
    try {
      const html = await (await fetch(`${admin.url}/`)).text();
      expect(html).toContain("ADMIN_PORT");
      expect(html).not.toContain('href="/docs"');
      expect((await fetch(`${admin.url}/docs`)).status).toBe(404);
    } finally {
      await admin.close();
    }
  });
});

describe("npm run ui (scripts/build-ui.ts) against a checkout made here", () => {
  const script = join(root, "scripts", "build-ui.ts");
  let work: string;
  let repo: string;
  let commit: string;
  let failing: string;
  const git = (cwd: string, ...args: string[]) => {
    const r = spawnSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], {
      cwd,
      encoding: "utf8",
    });
    if (r.status !== 0) throw new Error(`git ${args.join(" ")}: ${r.stderr}`);
    return r.stdout.trim();
  };
  /** A repository with a frontend/ like OpenHands' as far as the script cares: npm ci, then npm run build. */
  const makeCheckout = (dir: string, build: string): string => {
    mkdirSync(join(dir, "frontend"), { recursive: true });
    git(dir, "init", "-q");
    writeFileSync(join(dir, "README.md"), "not the UI\n");
    const pkg = {
      name: "fake-frontend",
      version: "1.0.0",
      private: true,
      // --ignore-scripts: a prepare (OpenHands runs husky there) that would fail the install.
      scripts: { prepare: "exit 3", build: "node build.mjs" },
    };
    writeFileSync(join(dir, "frontend", "package.json"), JSON.stringify(pkg));
    writeFileSync(
      join(dir, "frontend", "package-lock.json"),
      JSON.stringify({
        name: "fake-frontend",
        version: "1.0.0",
        lockfileVersion: 3,
        requires: true,
        packages: { "": { name: "fake-frontend", version: "1.0.0" } },
      }),
    );
    writeFileSync(join(dir, "frontend", "build.mjs"), build);
    git(dir, "add", ".");
    git(dir, "commit", "-qm", "frontend");
    return git(dir, "rev-parse", "HEAD");
  };
  const run = (args: string[], env: NodeJS.ProcessEnv = {}, viaNpm = false) => {
    const r = viaNpm
      ? spawnSync("npm", ["run", "--silent", "--prefix", root, "ui", "--", ...args], {
          cwd: work,
          encoding: "utf8",
          env: { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ""}`, ...env },
          timeout: 120_000,
        })
      : spawnSync(process.execPath, [script, ...args], {
          cwd: work,
          encoding: "utf8",
          env: { ...process.env, ...env },
          timeout: 120_000,
        });
    return { code: r.status, stdout: r.stdout, stderr: r.stderr };
  };
  const uiDirOf = (stdout: string) => /^UI_DIR=(\S+) npm start$/m.exec(stdout)?.[1] ?? "";

  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), "aws-ui-build-"));
    repo = join(work, "OpenHands");
    commit = makeCheckout(
      repo,
      'import { mkdirSync, writeFileSync } from "node:fs";\n' +
        'mkdirSync("build/assets", { recursive: true });\n' +
        'writeFileSync("build/index.html", "<!doctype html><title>built</title>");\n' +
        'writeFileSync("build/assets/app-1.js", "1");\n' +
        'console.log("built the UI");\n',
    );
    failing = join(work, "Broken");
    makeCheckout(
      failing,
      'console.log("compiling…");\nconsole.error("error TS2322: the build broke here");\nprocess.exit(4);\n',
    );
  });
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it("builds from a local checkout (a path relative to where npm ran) and prints the UI_DIR line", async () => {
    const cache = join(work, "cache");
    const r = run(["OpenHands", "--commit", commit, "--cache", "cache"], {}, true);
    expect(r.code, r.stderr).toBe(0);
    const uiDir = uiDirOf(r.stdout);
    expect(uiDir).toBe(join(cache, commit.slice(0, 12), "frontend", "build"));
    expect(r.stdout.trim().split("\n").at(-1)).toBe(`UI_DIR=${uiDir} npm start`);
    for (const line of [
      "ui: extracting frontend/",
      "ui: installing the frontend's packages",
      "ui: building it",
    ])
      expect(r.stderr).toContain(line);
    expect(readFileSync(join(uiDir, "index.html"), "utf8")).toContain("built");
    // Only frontend/ of that commit was extracted; the checkout itself is untouched.
    expect(existsSync(join(cache, commit.slice(0, 12), "README.md"))).toBe(false);
    expect(existsSync(join(repo, "frontend", "build"))).toBe(false);
    expect(readFileSync(join(cache, commit.slice(0, 12), "build.log"), "utf8")).toContain("built the UI");
    // The server takes the folder it printed.
    const served = await startTestApp({ web: { uiDir } });
    try {
      const b = new Browser(served.url);
      await b.signIn(await served.keyFor("u"));
      expect((await b.request("GET", "/")).text).toContain("<title>built</title>");
    } finally {
      await served.close();
    }
    // A second run reuses the build at once.
    const again = run(["OpenHands", "--commit", commit, "--cache", "cache"], {}, true);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stderr).toContain("is built already");
    expect(again.stderr).not.toContain("npm ci");
    expect(uiDirOf(again.stdout)).toBe(uiDir);
  }, 120_000);

  it("builds from a git URL: fetches the commit into the cache first", () => {
    const cache = join(work, "url-cache");
    const r = run([`file://${repo}`, "--commit", commit, "--cache", cache]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`ui: fetching ${commit.slice(0, 8)} from file://${repo}`);
    const uiDir = uiDirOf(r.stdout);
    expect(uiDir).toBe(join(cache, commit.slice(0, 12), "frontend", "build"));
    expect(existsSync(join(uiDir, "index.html"))).toBe(true);
  }, 120_000);

  it("says what is wrong: the commit missing (the default one too), a failing build with its log's end, no git", () => {
    const cache = join(work, "err-cache");
    const missing = run([repo, "--cache", cache]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain(`error: commit ${OPENHANDS_UI_COMMIT} is not in ${repo}`);
    expect(missing.stderr).toContain(`git -C ${repo} fetch origin`);

    const notRepo = run([join(work, "nowhere"), "--cache", cache]);
    expect(notRepo.code).toBe(1);
    expect(notRepo.stderr).toContain(`error: there is no folder ${join(work, "nowhere")}`);
    mkdirSync(join(work, "plain"));
    const plain = run([join(work, "plain"), "--cache", cache]);
    expect(plain.code).toBe(1);
    expect(plain.stderr).toContain("is not a git checkout");

    const broken = run([failing, "--commit", "HEAD", "--cache", cache]);
    expect(broken.code).toBe(1);
    expect(broken.stderr).toMatch(
      /error: npm run build failed \(exit code \d+\)\. The end of \S+build\.log:/,
    );
    expect(broken.stderr).toContain("error TS2322: the build broke here");
    expect(broken.stdout).toBe("");

    const noGit = run([repo, "--commit", commit, "--cache", cache], { PATH: dirname(process.execPath) });
    expect(noGit.code).toBe(1);
    expect(noGit.stderr).toContain("error: git is not installed");

    const usage = run([]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("Usage: npm run ui -- <OpenHands checkout or git URL>");
  }, 120_000);

  it("builds the commit the README and docs/testing.md name", () => {
    const short = OPENHANDS_UI_COMMIT.slice(0, 8);
    const readme = readFileSync(join(root, "README.md"), "utf8");
    const from = readme.indexOf("## Using the OpenHands web UI");
    const section = readme.slice(from, readme.indexOf("\n## ", from + 5));
    expect(section).toContain("npm run ui -- <OpenHands checkout or git URL>");
    expect(section).toContain(`commit ${short}`);
    const testing = readFileSync(join(root, "docs", "testing.md"), "utf8");
    expect(testing).toContain("npm run ui --");
    expect(testing).toContain(`at ${short}`);
    // No other commit named for the UI in either.
    for (const text of [readme, testing])
      for (const m of text.matchAll(/(?:commit|at|archive) ([0-9a-f]{7,40})\b/g))
        expect(OPENHANDS_UI_COMMIT.startsWith(m[1] ?? "")).toBe(true);
  });
});

describe("/api/options", () => {
  it("config: the open-source GetConfigResponse, behind the session key like every /api path", async () => {
    for (const path of ["config", "models", "agents", "security-analyzers"]) {
      const anon = await call(t.url, undefined, "GET", `/api/options/${path}`);
      expect(anon.status).toBe(401);
      expect(anon.body).toEqual({ detail: "Unauthorized" });
    }
    const b = new Browser(t.url);
    await b.signIn(key);
    expect((await b.request("GET", "/api/options/config")).status).toBe(200);
    const r = await call(t.url, key, "GET", "/api/options/config");
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      APP_MODE: "oss",
      GITHUB_CLIENT_ID: "",
      POSTHOG_CLIENT_KEY: "",
      PROVIDERS_CONFIGURED: [],
      FEATURE_FLAGS: {
        ENABLE_BILLING: false,
        HIDE_LLM_SETTINGS: false,
        ENABLE_JIRA: false,
        ENABLE_JIRA_DC: false,
        ENABLE_LINEAR: false,
      },
    });
    expect(r.headers.get("cache-control")).toContain("no-cache");
  });

  it("models, agents and security analyzers: configured lists sorted, built-in lists otherwise", async () => {
    expect((await call(t.url, key, "GET", "/api/options/models")).body).toEqual([
      "alpha/model-a",
      "zeta/model-b",
    ]);
    expect((await call(t.url, key, "GET", "/api/options/agents")).body).toEqual(["CodeActAgent"]);
    expect((await call(t.url, key, "GET", "/api/options/security-analyzers")).body).toEqual(["llm"]);
    const plain = await startTestApp({ web: { singleUser: true } });
    try {
      // Single-user mode: no key needed.
      const models = (await call(plain.url, undefined, "GET", "/api/options/models")).body as string[];
      expect(models).toEqual([...DEFAULT_MODELS].sort());
      expect(models.every((m) => /^[a-z0-9-]+\/[\w.-]+$/.test(m))).toBe(true);
      expect((await call(plain.url, undefined, "GET", "/api/options/security-analyzers")).body).toEqual([
        "invariant",
        "llm",
      ]);
    } finally {
      await plain.close();
    }
  });
});

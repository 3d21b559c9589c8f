import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/server/config.ts";
import { ConfigError } from "../../src/server/config-types.ts";
import { isLoopbackHost } from "../../src/server/web-config.ts";

describe("web configuration", () => {
  it("defaults: no UI, no CORS, api-key auth, 24 h sign-ins, built-in option lists", () => {
    const c = loadConfig({}, "/tmp");
    expect(c.web).toEqual({
      uiDir: undefined,
      corsOrigins: [],
      trustProxy: false,
      singleUser: false,
      sessionMaxAgeSeconds: 86400,
      options: { models: undefined, agents: undefined, securityAnalyzers: undefined },
    });
  });

  it("parses every variable", () => {
    const dir = mkdtempSync(join(tmpdir(), "aws-ui-cfg-"));
    try {
      writeFileSync(join(dir, "index.html"), "<html></html>");
      const c = loadConfig(
        {
          UI_DIR: dir,
          CORS_ORIGINS: "http://localhost:3001, https://ui.example.com",
          TRUST_PROXY: "true",
          AUTH_MODE: "single-user",
          SESSION_MAX_AGE_HOURS: "2",
          OPTIONS_MODELS: "a/x, b/y,,a/x",
          OPTIONS_AGENTS: "CodeActAgent",
          OPTIONS_SECURITY_ANALYZERS: "llm",
        },
        "/tmp",
      );
      expect(c.web).toEqual({
        uiDir: dir,
        corsOrigins: ["http://localhost:3001", "https://ui.example.com"],
        trustProxy: true,
        singleUser: true,
        sessionMaxAgeSeconds: 7200,
        options: { models: ["a/x", "b/y"], agents: ["CodeActAgent"], securityAnalyzers: ["llm"] },
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each([
    [{ AUTH_MODE: "single-user", HOST: "0.0.0.0" }, /only allowed when HOST is a loopback/],
    [{ AUTH_MODE: "single-user", HOST: "192.168.1.5" }, /loopback/],
    [{ AUTH_MODE: "none" }, /AUTH_MODE must be api-key or single-user/],
    [{ CORS_ORIGINS: "*" }, /CORS_ORIGINS entries must be origins/],
    [{ CORS_ORIGINS: "https://a.example.com/path" }, /CORS_ORIGINS/],
    [{ CORS_ORIGINS: "ftp://a.example.com" }, /CORS_ORIGINS/],
    [{ UI_DIR: "/nonexistent-ui-dir" }, /UI_DIR must be the folder holding the built frontend's index.html/],
    [{ TRUST_PROXY: "maybe" }, /TRUST_PROXY/],
    [{ SESSION_MAX_AGE_HOURS: "0" }, /SESSION_MAX_AGE_HOURS/],
  ])("refuses %j", (env, message) => {
    expect(() => loadConfig(env, "/tmp")).toThrow(ConfigError);
    expect(() => loadConfig(env, "/tmp")).toThrow(message);
  });

  it("UI_DIR: the folder holding index.html (frontend/build); a folder next to it is refused naming it", () => {
    const checkout = mkdtempSync(join(tmpdir(), "aws-ui-cfg-"));
    try {
      const build = join(checkout, "frontend", "build");
      mkdirSync(join(build, "assets"), { recursive: true });
      writeFileSync(join(build, "index.html"), "<html></html>");
      expect(loadConfig({ UI_DIR: "frontend/build" }, checkout).web.uiDir).toBe(build);
      // The frontend checkout itself, and the build/client folder older builds made: refused, pointing at build.
      for (const wrong of [join(checkout, "frontend"), join(build, "client"), join(build, "assets")]) {
        const load = () => loadConfig({ UI_DIR: wrong }, "/tmp");
        expect(load).toThrow(ConfigError);
        expect(load).toThrow(`UI_DIR must be the folder holding the built frontend's index.html`);
        expect(load).toThrow(`frontend/build after \`npm run build\``);
        expect(load).toThrow(`did you mean ${build}?`);
      }
      // A file named like the folder is no folder.
      const file = join(checkout, "index.html");
      writeFileSync(file, "x");
      expect(() => loadConfig({ UI_DIR: file }, "/tmp")).toThrow(/UI_DIR must be the folder/);
    } finally {
      rmSync(checkout, { recursive: true, force: true });
    }
  });

  it("single-user is accepted on every loopback HOST", () => {
    for (const host of ["127.0.0.1", "127.1.2.3", "localhost", "::1"]) {
      expect(isLoopbackHost(host)).toBe(true);
      expect(loadConfig({ AUTH_MODE: "single-user", HOST: host }, "/tmp").web.singleUser).toBe(true);
    }
    expect(isLoopbackHost("128.0.0.1")).toBe(false);
  });
});

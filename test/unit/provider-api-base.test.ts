import { describe, expect, it } from "vitest";
import { providerApiBase } from "../../src/adapters/git-providers/provider-clients.ts";
import { sameOriginLinks } from "../../src/adapters/git-providers/provider-http.ts";
import { ProviderHostPolicy } from "../../src/core/provider-host.ts";
import { parseMicroagent } from "../../src/domain/git/microagent-content.ts";

/** The API roots the provider clients call, computed only: nothing here opens a connection. */
describe("providerApiBase", () => {
  const none = new ProviderHostPolicy();

  it.each([
    ["github", null, "https://api.github.com"],
    ["github", "", "https://api.github.com"],
    ["github", "github.com", "https://api.github.com"],
    ["github", "ghe.example.com", "https://ghe.example.com/api/v3"],
    ["github", "GHE.Example.com:8443", "https://ghe.example.com:8443/api/v3"],
    ["gitlab", null, "https://gitlab.com/api/v4"],
    ["gitlab", "gitlab.com", "https://gitlab.com/api/v4"],
    ["gitlab", "git.example.org", "https://git.example.org/api/v4"],
    ["bitbucket", null, "https://api.bitbucket.org/2.0"],
    ["bitbucket", "bitbucket.org", "https://api.bitbucket.org/2.0"],
    // As the reference (bitbucket_service.py): a custom Bitbucket domain's API is on its "api." subdomain.
    ["bitbucket", "bitbucket.example.com", "https://api.bitbucket.example.com/2.0"],
    ["bitbucket", "bitbucket.example.com:8443", "https://api.bitbucket.example.com:8443/2.0"],
    ["azure_devops", null, "https://dev.azure.com"],
  ])("%s with host %j → %s", (provider, host, base) => {
    expect(providerApiBase(provider, host, none)).toBe(base);
  });

  it("plain HTTP only for hosts the operator allowed with http://; an allowed IP literal is used as is", () => {
    const loop = new ProviderHostPolicy(["http://127.0.0.1", "http://api.bb.example"]);
    expect(providerApiBase("github", "127.0.0.1:3000", loop)).toBe("http://127.0.0.1:3000/api/v3");
    expect(providerApiBase("gitlab", "127.0.0.1:3000", loop)).toBe("http://127.0.0.1:3000/api/v4");
    expect(providerApiBase("bitbucket", "127.0.0.1:3000", loop)).toBe("http://127.0.0.1:3000/2.0");
    // The Bitbucket API host is the one contacted, so its allow-list entry decides the scheme.
    expect(providerApiBase("bitbucket", "bb.example", loop)).toBe("http://api.bb.example/2.0");
    expect(providerApiBase("github", "ghe.example.com", loop)).toBe("https://ghe.example.com/api/v3");
  });

  it("throws for hosts the policy refuses (never a URL built from them)", () => {
    for (const host of ["127.0.0.1", "localhost", "https://x.example", "x.example/path"])
      expect(() => providerApiBase("gitlab", host, none), host).toThrow(/invalid gitlab host/);
  });
});

describe("sameOriginLinks", () => {
  it("keeps only the links on the API's origin", () => {
    const link =
      '<https://api.github.com/user/repos?page=2>; rel="next", <https://evil.example/user/repos?page=9>; rel="last"';
    expect(sameOriginLinks(link, "https://api.github.com")).toBe(
      '<https://api.github.com/user/repos?page=2>; rel="next"',
    );
    expect(sameOriginLinks('<http://127.0.0.2:9/x?page=2>; rel="next"', "https://api.github.com")).toBeNull();
    expect(sameOriginLinks(null, "https://api.github.com")).toBeNull();
  });
});

describe("parseMicroagent", () => {
  it("answers the body without front matter and the triggers", () => {
    const text =
      "---\nname: deploy\ntriggers:\n  - deploy\n  - ship it\n---\n\n# Deploy\n\nRun make deploy.\n";
    expect(parseMicroagent(".openhands/microagents/deploy.md", text)).toEqual({
      content: "# Deploy\n\nRun make deploy.",
      triggers: ["deploy", "ship it"],
      name: "deploy",
    });
  });

  it("a task microagent (inputs) also triggers on /name", () => {
    const text =
      "---\nname: release\ninputs:\n  - name: VERSION\n    description: v\n---\nRelease {{ VERSION }}";
    expect(parseMicroagent("microagents/release.md", text).triggers).toEqual(["/release"]);
  });

  it("files without front matter, and other agents' instruction files, are whole", () => {
    expect(parseMicroagent("microagents/a.md", "\n  Just text.\n")).toEqual({
      content: "Just text.",
      triggers: [],
    });
    const rules = "---\ntriggers: [x]\n---\nkeep all of it\n";
    expect(parseMicroagent(".cursorrules", rules)).toEqual({ content: rules, triggers: [] });
    expect(parseMicroagent("docs/AGENTS.md", rules)).toEqual({ content: rules, triggers: [] });
  });

  it("front matter that is not YAML, or triggers that are not strings, cannot be parsed", () => {
    expect(() => parseMicroagent("m.md", "---\ntriggers: [unclosed\n---\nx")).toThrow(/Failed to parse/);
    expect(() => parseMicroagent("m.md", "---\ntriggers: [1, {a: b}]\n---\nx")).toThrow(/triggers/);
  });
});

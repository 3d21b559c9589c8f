import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { HttpGitProviderVerifier } from "../../src/adapters/git-providers/http-git-provider-verifier.ts";
import { ProviderHostPolicy } from "../../src/core/provider-host.ts";

describe("HttpGitProviderVerifier: a provider it cannot reach", () => {
  it("answers unreachable and logs the provider, the host and the cause, never the token", async () => {
    // A port that refuses connections: listen, note the port, close.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const logged: { msg: string; data: Record<string, unknown> }[] = [];
    const verifier = new HttpGitProviderVerifier({
      timeoutMs: 2000,
      hosts: new ProviderHostPolicy(["http://127.0.0.1"]),
      log: (msg, data) => logged.push({ msg, data }),
    });
    const token = "glpat-VERY-SECRET-1234";
    expect(await verifier.verify("gitlab", token, `127.0.0.1:${port}`)).toBe("unreachable");
    expect(logged).toHaveLength(1);
    expect(logged[0]?.msg).toBe("git provider token check could not reach the provider");
    expect(logged[0]?.data).toMatchObject({ provider: "gitlab", host: `127.0.0.1:${port}` });
    expect(String(logged[0]?.data.cause)).toMatch(/ECONNREFUSED|refused/i);
    expect(JSON.stringify(logged)).not.toContain("SECRET");

    // A host the policy does not allow: the cause says so.
    expect(await verifier.verify("gitlab", token, "10.0.0.5")).toBe("unreachable");
    expect(String(logged[1]?.data.cause)).not.toBe("");
    expect(JSON.stringify(logged)).not.toContain("SECRET");
  });
});

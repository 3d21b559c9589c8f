import { request } from "node:http";
import { Code, ConnectError } from "@connectrpc/connect";
import type { ServiceError } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HttpGitProviderVerifier } from "../../src/adapters/git-providers/http-git-provider-verifier.ts";
import { ProviderHostPolicy } from "../../src/core/provider-host.ts";
import { GitService } from "../../src/gen/workspace/v1/git_pb.js";
import { ProviderType } from "../../src/gen/workspace/v1/provider_pb.js";
import {
  type FakeAccount,
  type FakeGitProvider,
  startFakeGitProvider,
} from "../helpers/fake-git-providers.ts";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

/**
 * Provider rate limits, failures and cancellation as every protocol answers them: REST (429/503 JSON), Connect
 * and gRPC (RESOURCE_EXHAUSTED with retry-after metadata, UNAVAILABLE).
 */
const TIMEOUT_MS = 500;
const account = (kind: string, n: number): FakeAccount => ({
  token: `${kind}_limits_SECRET_${n}`,
  login: `${kind}-user-${n}`,
  id: n,
  repos: [{ name: `${kind}-user-${n}/repo`, branches: ["main"] }],
});
const GH = Array.from({ length: 8 }, (_, i) => account("gh", i));
const BB = Array.from({ length: 4 }, (_, i) => account("bb", i));

let t: TestApp;
let gh: FakeGitProvider;
let bb: FakeGitProvider;
const hosts = new ProviderHostPolicy(["http://127.0.0.1"]);

beforeAll(async () => {
  gh = await startFakeGitProvider("github", GH);
  bb = await startFakeGitProvider("bitbucket", BB);
  t = await startTestApp({
    verifier: new HttpGitProviderVerifier({ timeoutMs: TIMEOUT_MS, hosts }),
    git: { hosts, timeoutMs: TIMEOUT_MS, repositoryCacheSeconds: 0 },
  });
});
afterAll(async () => {
  await t?.close();
  await Promise.all([gh?.close(), bb?.close()]);
});

/** A user holding one token (stored without verification, as a token that later hits a limit). */
async function userWith(app: TestApp, provider: "github" | "bitbucket", a: FakeAccount): Promise<string> {
  const key = await app.keyFor(`${provider}-${a.login}`);
  const fake = provider === "github" ? gh : bb;
  const r = await call(app.url, key, "POST", "/api/settings", {
    secrets_store: { provider_tokens: { [provider]: { token: a.token, host: fake.host } } },
  });
  expect(r.status).toBe(200);
  return key;
}

async function during<T>(
  fake: FakeGitProvider,
  mode: Parameters<FakeGitProvider["set"]>[0],
  fn: () => Promise<T>,
) {
  fake.set(mode);
  try {
    return await fn();
  } finally {
    fake.set(Object.fromEntries(Object.keys(mode).map((k) => [k, k === "serverError" ? 0 : false])));
  }
}

const rejection = (p: Promise<unknown>): Promise<unknown> =>
  p.then(
    () => {
      throw new Error("expected the call to fail");
    },
    (e: unknown) => e,
  );

describe("GitHub's secondary rate limit (a 403 whose message says so, without rate-limit headers)", () => {
  it("REST: 429, never a plain 403; no made-up Retry-After; then the token waits without reaching GitHub", async () => {
    const key = await userWith(t, "github", GH[0] as FakeAccount);
    const first = await during(gh, { secondaryRateLimited: true }, () =>
      call(t.url, key, "GET", "/api/user/info"),
    );
    expect(first.status).toBe(429);
    expect((first.body as { error: string }).error).toMatch(/GitHub rate limit/);
    expect(first.headers.get("retry-after")).toBeNull();
    const before = gh.requests.length;
    const again = await call(t.url, key, "GET", "/api/user/repository/branches?repository=gh-user-0/repo");
    expect(again.status).toBe(429);
    // The remembered wait (GitHub's guidance: at least a minute) is known now, so it is said.
    const wait = Number(again.headers.get("retry-after"));
    expect(wait).toBeGreaterThan(0);
    expect(wait).toBeLessThanOrEqual(60);
    expect(gh.requests.length).toBe(before);
  });

  it("a 403 that is not a rate limit stays 403 (PERMISSION_DENIED)", async () => {
    const key = await userWith(t, "github", GH[1] as FakeAccount);
    const r = await during(gh, { forbidden: true }, () =>
      call(t.url, key, "GET", "/api/user/repositories?selected_provider=github&page=1&per_page=5"),
    );
    expect(r.status).toBe(403);
    expect((r.body as { error: string }).error).toMatch(/GitHub denied access/);
  });

  it("token verification during a secondary limit answers 503 (provider unreachable), not 'invalid token'", async () => {
    const key = await t.keyFor("verify-during-limit");
    const r = await during(gh, { secondaryRateLimited: true }, () =>
      call(t.url, key, "POST", "/api/add-git-providers", {
        provider_tokens: { github: { token: (GH[2] as FakeAccount).token, host: gh.host } },
      }),
    );
    expect(r.status).toBe(503);
  });

  it("Connect: RESOURCE_EXHAUSTED; gRPC: RESOURCE_EXHAUSTED", async () => {
    const key = await userWith(t, "github", GH[3] as FakeAccount);
    await during(gh, { secondaryRateLimited: true }, async () => {
      const c = ConnectError.from(await rejection(connectClient(GitService, t.url, key).getUserInfo({})));
      expect(c.code).toBe(Code.ResourceExhausted);
    });
    const grpc = grpcClient(GitService, t.grpcAddress);
    try {
      const g = (await rejection(grpc.unary("GetUserInfo", {}, key))) as ServiceError;
      expect(g.code).toBe(8);
      // Blocked by the remembered limit: the wait is known and sent as trailer metadata.
      expect(Number(g.metadata.get("retry-after")[0])).toBeGreaterThan(0);
    } finally {
      grpc.raw.close();
    }
  });
});

describe("Bitbucket 429 with Retry-After", () => {
  it("REST 429 with the provider's Retry-After; Connect and gRPC RESOURCE_EXHAUSTED with retry-after metadata", async () => {
    const key = await userWith(t, "bitbucket", BB[0] as FakeAccount);
    await during(bb, { rateLimited: true }, async () => {
      const r = await call(
        t.url,
        key,
        "GET",
        "/api/user/repositories?selected_provider=bitbucket&page=1&per_page=5",
      );
      expect(r.status).toBe(429);
      expect(r.headers.get("retry-after")).toBe("30");
      expect((r.body as { error: string }).error).toMatch(/Bitbucket rate limit/);
    });
    const connectKey = await userWith(t, "bitbucket", BB[1] as FakeAccount);
    await during(bb, { rateLimited: true }, async () => {
      const c = ConnectError.from(
        await rejection(
          connectClient(GitService, t.url, connectKey).listRepositories({
            selectedProvider: ProviderType.BITBUCKET,
            page: 1,
            perPage: 5,
          }),
        ),
      );
      expect(c.code).toBe(Code.ResourceExhausted);
      expect(c.metadata.get("retry-after")).toBe("30");
    });
    const grpcKey = await userWith(t, "bitbucket", BB[2] as FakeAccount);
    const grpc = grpcClient(GitService, t.grpcAddress);
    try {
      const g = (await during(bb, { rateLimited: true }, () =>
        rejection(grpc.unary("ListInstallations", { provider: ProviderType.BITBUCKET }, grpcKey)),
      )) as ServiceError;
      expect(g.code).toBe(8);
      expect(g.metadata.get("retry-after")).toEqual(["30"]);
    } finally {
      grpc.raw.close();
    }
  });
});

describe("a failing or hanging provider: 503 / UNAVAILABLE on every protocol", () => {
  it("5xx", async () => {
    const key = await userWith(t, "github", GH[4] as FakeAccount);
    await during(gh, { serverError: 502 }, async () => {
      const r = await call(t.url, key, "GET", "/api/user/info");
      expect(r.status).toBe(503);
      expect((r.body as { error: string }).error).toMatch(/GitHub is unavailable \(HTTP 502\)/);
      const c = ConnectError.from(await rejection(connectClient(GitService, t.url, key).getUserInfo({})));
      expect(c.code).toBe(Code.Unavailable);
      const grpc = grpcClient(GitService, t.grpcAddress);
      try {
        const g = (await rejection(grpc.unary("GetUserInfo", {}, key))) as ServiceError;
        expect(g.code).toBe(14);
      } finally {
        grpc.raw.close();
      }
    });
  });

  it("hanging: UNAVAILABLE within the provider timeout over Connect and gRPC", async () => {
    const key = await userWith(t, "bitbucket", BB[3] as FakeAccount);
    await during(bb, { hang: true }, async () => {
      const started = Date.now();
      const c = ConnectError.from(
        await rejection(
          connectClient(GitService, t.url, key).listInstallations({ provider: ProviderType.BITBUCKET }),
        ),
      );
      expect([c.code, c.rawMessage]).toEqual([
        Code.Unavailable,
        `Bitbucket did not answer within ${TIMEOUT_MS} ms`,
      ]);
      const grpc = grpcClient(GitService, t.grpcAddress);
      try {
        const g = (await rejection(
          grpc.unary("SearchBranches", { repository: "bb-user-3/repo", query: "m" }, key),
        )) as ServiceError;
        // Search without a selected provider answers the failure that says most, not an empty list.
        expect(g.code).toBe(14);
      } finally {
        grpc.raw.close();
      }
      expect(Date.now() - started).toBeLessThan(2 * TIMEOUT_MS + 1500);
    });
  });
});

describe("cancellation", () => {
  it("a client that goes away stops the provider call at once (REST and Connect), long before the timeout", async () => {
    const started = Date.now();
    const slow = await startTestApp({ git: { hosts, timeoutMs: 20_000, repositoryCacheSeconds: 60 } });
    try {
      const key = await userWith(slow, "github", GH[5] as FakeAccount);
      await during(gh, { hang: true }, async () => {
        const waitFor = async (n: number) => {
          for (let i = 0; i < 100 && gh.abandoned() < n; i++) await new Promise((r) => setTimeout(r, 20));
          return gh.abandoned();
        };
        const base = gh.abandoned();
        const sent = gh.requests.length;
        // node:http, destroyed mid-call: a client that disconnects (undici's abort keeps its socket a while).
        const req = request(`${slow.url}/api/user/info`, {
          headers: { "x-session-api-key": key },
          agent: false,
        });
        req.on("error", () => {});
        req.end();
        for (let i = 0; i < 100 && gh.requests.length === sent; i++)
          await new Promise((r) => setTimeout(r, 10));
        req.destroy();
        expect(await waitFor(base + 1)).toBe(base + 1);
        const connectAbort = new AbortController();
        const connectCall = connectClient(GitService, slow.url, key)
          .getUserInfo({}, { signal: connectAbort.signal })
          .catch((e: unknown) => ConnectError.from(e).code);
        for (let i = 0; i < 100 && gh.requests.length === sent + 1; i++)
          await new Promise((r) => setTimeout(r, 10));
        connectAbort.abort();
        expect(await connectCall).toBe(Code.Canceled);
        expect(await waitFor(base + 2)).toBe(base + 2);
      });
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      await slow.close();
    }
  });
});

import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ProviderHostPolicy } from "../../src/core/provider-host.ts";
import { GitService } from "../../src/gen/workspace/v1/git_pb.js";
import { ProviderType } from "../../src/gen/workspace/v1/provider_pb.js";
import { type FakeGitProvider, startFakeGitProvider } from "../helpers/fake-git-providers.ts";
import { connectClient, grpcClient } from "../helpers/rpc-clients.ts";
import { call, startTestApp, type TestApp } from "../helpers/test-app.ts";

const GH = "ghp_micro_SECRET_1";
const GL = "glpat_micro_SECRET_2";
const BB = "bb_micro_SECRET_3";
const BB_LIMITED = "bb_micro_SECRET_4";
const DEPLOY = "---\nname: deploy\ntriggers:\n- deploy\n- ship\n---\n\n# Deploy\nRun `make deploy`.\n";
const RELEASE =
  "---\nname: release\ninputs:\n  - name: VERSION\n    description: the version\n---\nRelease {{ VERSION }}.";
const BROKEN = "---\ntriggers: [unclosed\n---\nbody";

let t: TestApp;
let gh: FakeGitProvider;
let gl: FakeGitProvider;
let bb: FakeGitProvider;
let key: string;

beforeAll(async () => {
  gh = await startFakeGitProvider("github", [
    {
      token: GH,
      login: "mia",
      id: 1,
      repos: [
        {
          name: "mia/app",
          files: [
            ".openhands/microagents/deploy.md",
            ".openhands/microagents/release.md",
            ".openhands/microagents/broken.md",
          ],
          contents: {
            ".openhands/microagents/deploy.md": DEPLOY,
            ".openhands/microagents/release.md": RELEASE,
            ".openhands/microagents/broken.md": BROKEN,
          },
        },
      ],
    },
  ]);
  gl = await startFakeGitProvider("gitlab", [
    {
      token: GL,
      login: "mia-gl",
      id: 2,
      repos: [
        {
          name: "group/sub/proj",
          org: true,
          files: [".openhands/microagents/lint.md", ".openhands/microagents/README.md"],
          contents: { ".openhands/microagents/lint.md": "---\ntriggers: [lint]\n---\nUse biome." },
        },
      ],
    },
  ]);
  const service = {
    name: "ws/service",
    branches: ["trunk", "dev"],
    files: [".cursorrules", ".openhands/microagents/ops.md"],
    contents: { ".cursorrules": "---\nnot: front matter here\n---\nAlways test.\n" },
  };
  bb = await startFakeGitProvider("bitbucket", [
    { token: BB_LIMITED, login: "mia-bb2", id: 4, repos: [service] },
    {
      token: BB,
      login: "mia-bb",
      id: 3,
      repos: [service],
    },
  ]);
  const hosts = new ProviderHostPolicy(["http://127.0.0.1"]);
  t = await startTestApp({ git: { hosts, timeoutMs: 2_000, repositoryCacheSeconds: 60 } });
  key = await t.keyFor("mia");
  const stored = await call(t.url, key, "POST", "/api/add-git-providers", {
    provider_tokens: {
      github: { token: GH, host: gh.host },
      gitlab: { token: GL, host: gl.host },
      bitbucket: { token: BB, host: bb.host },
    },
  });
  expect(stored.status).toBe(200);
});
afterAll(async () => {
  await t?.close();
  await Promise.all([gh?.close(), gl?.close(), bb?.close()]);
});

const rejection = (p: Promise<unknown>): Promise<ConnectError> =>
  p.then(
    () => {
      throw new Error("expected the call to fail");
    },
    (e: unknown) => ConnectError.from(e),
  );
const get = (path: string, k = key) => call(t.url, k, "GET", path);
const content = (repo: string, file: string) =>
  get(`/api/user/repository/${repo}/microagents/content?file_path=${encodeURIComponent(file)}`);

describe("microagent listing on a full repository path", () => {
  it("a GitLab subgroup project (group/sub/proj) is listed, as the reference's {repository_name:path}", async () => {
    const r = await get("/api/user/repository/group/sub/proj/microagents");
    expect(r.status, r.text).toBe(200);
    expect(r.body).toEqual([
      { name: "lint", path: ".openhands/microagents/lint.md", created_at: expect.any(String) },
    ]);
    // GitHub was asked first and has no such repository; GitLab got the whole path as its project id.
    expect(
      gl.requests.some((q) => q.path.startsWith("/api/v4/projects/group%2Fsub%2Fproj/repository/tree")),
    ).toBe(true);
  });

  it("Bitbucket files are read from the repository's main branch", async () => {
    const r = await get("/api/user/repository/ws/service/microagents");
    expect(r.body).toEqual([
      { name: "cursorrules", path: ".cursorrules", created_at: expect.any(String) },
      { name: "ops", path: ".openhands/microagents/ops.md", created_at: expect.any(String) },
    ]);
    expect(bb.requests.some((q) => q.path.startsWith("/2.0/repositories/ws/service/src/trunk/"))).toBe(true);
  });

  it("a user with no provider token: an empty list, as the reference (not 401)", async () => {
    const r = await get("/api/user/repository/group/sub/proj/microagents", await t.keyFor("no-tokens"));
    expect([r.status, r.body]).toEqual([200, []]);
  });

  it("a path without a route after the repository is a FastAPI 404", async () => {
    const r = await get("/api/user/repository/mia/app/elsewhere");
    expect([r.status, r.body]).toEqual([404, { detail: "Not Found" }]);
    expect(r.headers.get("content-type")).toContain("application/json");
  });
});

describe("GET /api/user/repository/{repository_name:path}/microagents/content", () => {
  it("answers the reference's MicroagentContentResponse: body without front matter, triggers, provider", async () => {
    const r = await content("mia/app", ".openhands/microagents/deploy.md");
    expect(r.status, r.text).toBe(200);
    expect(r.body).toEqual({
      content: "# Deploy\nRun `make deploy`.",
      path: ".openhands/microagents/deploy.md",
      triggers: ["deploy", "ship"],
      git_provider: "github",
    });
    const task = (await content("mia/app", ".openhands/microagents/release.md")).body as {
      triggers: string[];
    };
    expect(task.triggers).toEqual(["/release"]);
  });

  it("reads GitLab subgroup projects (raw file API) and Bitbucket main branches", async () => {
    const g = await content("group/sub/proj", ".openhands/microagents/lint.md");
    expect(g.body).toEqual({
      content: "Use biome.",
      path: ".openhands/microagents/lint.md",
      triggers: ["lint"],
      git_provider: "gitlab",
    });
    expect(
      gl.requests.some((q) =>
        q.path.startsWith(
          "/api/v4/projects/group%2Fsub%2Fproj/repository/files/.openhands%2Fmicroagents%2Flint.md/raw",
        ),
      ),
    ).toBe(true);
    const b = await content("ws/service", ".cursorrules");
    // .cursorrules is instructions as a whole: nothing is taken for front matter.
    expect(b.body).toEqual({
      content: "---\nnot: front matter here\n---\nAlways test.\n",
      path: ".cursorrules",
      triggers: [],
      git_provider: "bitbucket",
    });
  });

  it("a file no provider has (or cannot parse), and a user without tokens: 401 with the reference's message", async () => {
    const missing = await content("mia/app", ".openhands/microagents/none.md");
    expect([missing.status, missing.body]).toEqual([
      401,
      "Microagent file .openhands/microagents/none.md not found in mia/app",
    ]);
    const broken = await content("mia/app", ".openhands/microagents/broken.md");
    expect([broken.status, broken.body]).toEqual([
      401,
      "Microagent file .openhands/microagents/broken.md not found in mia/app",
    ]);
    const r = await get(
      "/api/user/repository/mia/app/microagents/content?file_path=a.md",
      await t.keyFor("no-tokens-2"),
    );
    expect([r.status, r.body]).toEqual([401, "Microagent file a.md not found in mia/app"]);
  });

  it("bad input: FastAPI 422 at the query parameter or the path, nothing sent to a provider", async () => {
    const before = gh.requests.length + gl.requests.length + bb.requests.length;
    const none = await get("/api/user/repository/mia/app/microagents/content");
    expect(none.status).toBe(422);
    expect((none.body as { detail: { loc: unknown[]; type: string }[] }).detail[0]).toMatchObject({
      loc: ["query", "file_path"],
      type: "missing",
    });
    for (const bad of ["../secrets", "a/../../b", "/etc/passwd", "a//b", "a\\b", "x\u0000y", "a/./b"]) {
      const r = await content("mia/app", bad);
      expect(r.status, bad).toBe(422);
      expect((r.body as { detail: { loc: unknown[] }[] }).detail[0]?.loc, bad).toEqual([
        "query",
        "file_path",
      ]);
    }
    const repo = await get("/api/user/repository/mia/a b/microagents/content?file_path=x.md");
    expect(repo.status).toBe(422);
    expect((repo.body as { detail: { loc: unknown[] }[] }).detail[0]?.loc).toEqual([
      "path",
      "repository_name",
    ]);
    expect(gh.requests.length + gl.requests.length + bb.requests.length).toBe(before);
  });

  it("a provider rate limit is answered as such (429), not as a missing file", async () => {
    const k = await t.keyFor("mia-rl");
    await call(t.url, k, "POST", "/api/add-git-providers", {
      provider_tokens: { bitbucket: { token: BB_LIMITED, host: bb.host } },
    });
    bb.set({ rateLimited: true });
    try {
      const r = await get(
        "/api/user/repository/ws/service/microagents/content?file_path=.openhands/microagents/ops.md",
        k,
      );
      expect(r.status).toBe(429);
      expect(r.headers.get("retry-after")).toBe("30");
    } finally {
      bb.set({ rateLimited: false });
    }
  });
});

describe("GetMicroagentContent over Connect and gRPC", () => {
  it("answers what REST answers, and UNAUTHENTICATED for a missing file", async () => {
    const connect = connectClient(GitService, t.url, key);
    const c = await connect.getMicroagentContent({
      repository: "group/sub/proj",
      filePath: ".openhands/microagents/lint.md",
    });
    expect([c.content, c.triggers, c.gitProvider]).toEqual(["Use biome.", ["lint"], ProviderType.GITLAB]);
    const err = await rejection(connect.getMicroagentContent({ repository: "mia/app", filePath: "nope.md" }));
    expect([err.code, err.rawMessage]).toEqual([
      Code.Unauthenticated,
      "Microagent file nope.md not found in mia/app",
    ]);
    const bad = await rejection(connect.getMicroagentContent({ repository: "mia/app", filePath: "../x" }));
    expect(bad.code).toBe(Code.InvalidArgument);
    const grpc = grpcClient(GitService, t.grpcAddress);
    try {
      const g = await grpc.unary<{ content: string; triggers: string[] }>(
        "GetMicroagentContent",
        { repository: "mia/app", filePath: ".openhands/microagents/deploy.md" },
        key,
      );
      expect([g.content, g.triggers]).toEqual(["# Deploy\nRun `make deploy`.", ["deploy", "ship"]]);
    } finally {
      grpc.raw.close();
    }
  });
});

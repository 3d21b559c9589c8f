import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { validate } from "../../src/core/model/validate.ts";
import { dateTime, parseDateTime, uuidHex } from "../../src/core/model-formats.ts";
import {
  branchProblem,
  cloneSource,
  localRepositoryPath,
  localRepositoryProblem,
  parsePrepareOutput,
  prepareCommand,
  redact,
  repositoryDirName,
  repositoryProblem,
  shellQuote,
  withoutCredentials,
} from "../../src/domain/conversations/workspace-commands.ts";

describe("clone URLs", () => {
  it("embeds the token as the reference does, per provider, on the stored or public host", () => {
    expect(cloneSource("o/r", "github", { token: "ghp_x", host: null }).url).toBe(
      "https://ghp_x@github.com/o/r.git",
    );
    expect(cloneSource("o/r", "github", { token: "t", host: "ghe.example.com" }).url).toBe(
      "https://t@ghe.example.com/o/r.git",
    );
    expect(cloneSource("g/p", "gitlab", { token: "glpat", host: null }).url).toBe(
      "https://oauth2:glpat@gitlab.com/g/p.git",
    );
    expect(cloneSource("w/r", "bitbucket", { token: "tok", host: null }).url).toBe(
      "https://x-token-auth:tok@bitbucket.org/w/r.git",
    );
    expect(cloneSource("w/r", "bitbucket", { token: "me:app pw", host: null }).url).toBe(
      "https://me:app%20pw@bitbucket.org/w/r.git",
    );
    expect(cloneSource("org/proj/repo", "azure_devops", { token: "pat", host: null }).url).toBe(
      "https://pat@dev.azure.com/org/proj/_git/repo",
    );
    // A host with a scheme keeps it (self-hosted over http).
    expect(cloneSource("w/r", "bitbucket", { token: "me:pw", host: null }).secrets).toEqual([
      "me:pw",
      "me:pw",
    ]);
    expect(cloneSource("o/r", "gitlab", { token: "t", host: "http://git.local:8080/" }).url).toBe(
      "http://oauth2:t@git.local:8080/o/r.git",
    );
    // Tokens with URL metacharacters are encoded; the token and the userinfo are listed for redaction.
    const s = cloneSource("o/r", "github", { token: "a/b@c", host: null });
    expect(s.url).toBe("https://a%2Fb%40c@github.com/o/r.git");
    expect(s.secrets).toEqual(["a/b@c", "a%2Fb%40c"]);
  });

  it("without a token clones anonymously; paths and URLs with a scheme are used as given", () => {
    expect(cloneSource("o/r", null, null)).toEqual({ url: "https://github.com/o/r.git", secrets: [] });
    expect(cloneSource("/srv/git/x.git", "github", { token: "t", host: null })).toEqual({
      url: "/srv/git/x.git",
      secrets: [],
    });
    expect(cloneSource("file:///srv/x.git", "github", null).url).toBe("file:///srv/x.git");
    expect(cloneSource("ssh://git@host/x.git", null, null).url).toBe("ssh://git@host/x.git");
  });

  it("credentials are stripped for comparisons and redacted from output", () => {
    expect(withoutCredentials("https://oauth2:t@gitlab.com/g/p.git")).toBe("https://gitlab.com/g/p.git");
    expect(withoutCredentials("/srv/x.git")).toBe("/srv/x.git");
    expect(redact("fatal: https://ghp_secret@github.com failed", ["ghp_secret"])).toBe(
      "fatal: https://***@github.com failed",
    );
  });
});

describe("repository and branch names", () => {
  it("folder names, accepted forms and refused ones", () => {
    expect(repositoryDirName("owner/repo")).toBe("repo");
    expect(repositoryDirName("/srv/git/project.git")).toBe("project");
    expect(repositoryDirName("file:///srv/git/project.git/")).toBe("project");
    expect(repositoryDirName("https://h/x/my repo.git?x=1")).toBe("my-repo");
    expect(repositoryDirName("/")).toBe("project");
    expect(repositoryProblem("owner/repo")).toBeNull();
    expect(repositoryProblem("org/proj/repo")).toBeNull();
    expect(repositoryProblem("/abs/path")).toBeNull();
    expect(repositoryProblem("https://x/y")).toBeNull();
    expect(repositoryProblem("justaname")).not.toBeNull();
    expect(repositoryProblem("--upload-pack=evil")).not.toBeNull();
    expect(repositoryProblem("a/b; rm -rf /")).not.toBeNull();
    expect(branchProblem("feature/x-1")).toBeNull();
    for (const bad of ["-f", "a b", "a..b", "a~1", "x:y", "a\nb"]) expect(branchProblem(bad)).not.toBeNull();
  });

  it("shell quoting survives any string", () => {
    for (const s of ["plain", "it's", "$(whoami)", "`id`", 'a"b', "new\nline", ""]) {
      expect(execFileSync("/bin/sh", ["-c", `printf %s ${shellQuote(s)}`], { encoding: "utf8" })).toBe(s);
    }
  });

  it("reads the markers of the prepare command", () => {
    expect(parsePrepareOutput("noise\n__OH_PROJECT_DIR__=/w/project\n__OH_HAS_SETUP_SCRIPT__\n")).toEqual({
      projectDir: "/w/project",
      hasSetupScript: true,
      hasPreCommit: false,
    });
    expect(parsePrepareOutput("nothing")).toBeNull();
  });
});

describe("UUID and datetime formats", () => {
  it("UUIDs with or without dashes become 32 hex; others get pydantic's uuid_parsing message", () => {
    expect(validate(uuidHex(), "0F3B6B1E-8D3A-4C61-9D4A-2B7F3C9E1A55", ["q"])).toBe(
      "0f3b6b1e8d3a4c619d4a2b7f3c9e1a55",
    );
    const message = (input: string) => {
      try {
        validate(uuidHex(), input, ["q"]);
        return "";
      } catch (e) {
        return (e as { violations: { msg: string; type: string }[] }).violations[0]?.msg ?? "";
      }
    };
    expect(message("abc")).toBe(
      "Input should be a valid UUID, invalid length: expected length 32 for simple format, found 3",
    );
    expect(message("not-a-uuid")).toBe(
      "Input should be a valid UUID, invalid character: expected an optional prefix of `urn:uuid:` followed by [0-9a-fA-F-], found `n` at 1",
    );
    expect(message("0f3b6b1e-8d3a-4c61-9d4a")).toBe(
      "Input should be a valid UUID, invalid group count: expected 5, found 4",
    );
    expect(message("0f3b6b1e-8d3a-4c61-9d4a-2b7f3c9e1a5")).toBe(
      "Input should be a valid UUID, invalid group length in group 4: expected 12, found 11",
    );
  });

  it("datetimes: ISO with offsets, dates, Unix timestamps; otherwise a reason", () => {
    const iso = (s: string) => {
      const d = parseDateTime(s);
      return typeof d === "string" ? d : d.toISOString();
    };
    expect(iso("2025-01-02T03:04:05Z")).toBe("2025-01-02T03:04:05.000Z");
    expect(iso("2025-01-02T03:04:05.123456+02:00")).toBe("2025-01-02T01:04:05.123Z");
    expect(iso("2025-01-02 03:04")).toBe("2025-01-02T03:04:00.000Z");
    expect(iso("2025-01-02")).toBe("2025-01-02T00:00:00.000Z");
    expect(iso("1700000000")).toBe("2023-11-14T22:13:20.000Z");
    expect(iso("1700000000000")).toBe("2023-11-14T22:13:20.000Z");
    expect(iso("yesterday")).toBe("input is too short");
    expect(iso("2025-13-01")).toBe("month value is outside expected range of 1-12");
    expect(iso("2025-02-30")).toBe("day value is outside expected range");
    expect(iso("2025-01-02T25:00")).toBe("hour value is outside expected range of 0-23");
    expect(iso("01/02/2025")).toBe("invalid character in year");
    expect(() => validate(dateTime(), "nope", ["query", "d"])).toThrow(/valid datetime or date/);
  });
});

describe("local repositories (LOCAL_REPOSITORY_ROOTS)", () => {
  it("localRepositoryPath: absolute paths and file:// URLs of this machine, normalized; nothing else", () => {
    expect(localRepositoryPath("/srv/repos/a.git")).toBe("/srv/repos/a.git");
    expect(localRepositoryPath("/srv/repos/../etc/")).toBe("/srv/etc");
    expect(localRepositoryPath("file:///srv/repos/my%20repo")).toBe("/srv/repos/my repo");
    expect(localRepositoryPath("file://localhost/srv/x")).toBe("/srv/x");
    expect(localRepositoryPath("file://otherhost/srv/x")).toBeNull();
    expect(localRepositoryPath("https://github.com/a/b")).toBeNull();
    expect(localRepositoryPath("owner/repo")).toBeNull();
  });

  it("localRepositoryProblem: inside a root or nothing; the message says why and names the variable", () => {
    const roots = ["/srv/repos", "/mirrors"];
    expect(localRepositoryProblem("/srv/repos/a.git", roots)).toBeNull();
    expect(localRepositoryProblem("file:///mirrors/x", roots)).toBeNull();
    expect(localRepositoryProblem("/srv/repos", roots)).toBeNull();
    expect(localRepositoryProblem("owner/repo", [])).toBeNull();
    expect(localRepositoryProblem("https://h/x.git", [])).toBeNull();
    expect(localRepositoryProblem("/srv/repos-other/a.git", roots)).toBe(
      "selected_repository is a local path outside LOCAL_REPOSITORY_ROOTS (/srv/repos, /mirrors): sandboxes see only those folders of the host",
    );
    expect(localRepositoryProblem("/srv/repos/../../etc", roots)).not.toBeNull();
    expect(localRepositoryProblem("/srv/repos/a.git", [])).toContain("LOCAL_REPOSITORY_ROOTS");
    expect(localRepositoryProblem("/anything", ["/"])).toBeNull();
  });

  it("a local clone trusts only that repository (safe.directory) in a clone-only global git configuration", () => {
    const cmd = prepareCommand({
      clone: { url: "/srv/repos/a b.git", dir: "a-b" },
      branch: null,
      gitUserName: null,
      gitUserEmail: null,
    });
    // The path as given (a bare repository) and its .git folder (what git checks in one with a working tree).
    expect(cmd).toContain(`'"/srv/repos/a b.git"' '"/srv/repos/a b.git/.git"' >"$trust"`);
    expect(cmd).toContain(`GIT_CONFIG_GLOBAL="$trust" git clone -q -- '/srv/repos/a b.git' 'a-b'`);
    const remote = prepareCommand({
      clone: { url: "https://h/x.git", dir: "x" },
      branch: null,
      gitUserName: null,
      gitUserEmail: null,
    });
    expect(remote).not.toContain("GIT_CONFIG_GLOBAL");
  });
});

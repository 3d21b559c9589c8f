// ApiKeyService over an in-memory api-key repository.
import { createHash } from "node:crypto";
import { beforeEach, describe, expect, it } from "vitest";
import { ApiKeyService, DEFAULT_USER, ENV_KEY_LABEL } from "../../../src/domain/keys/api-key-service.ts";
import { InMemoryApiKeyRepository } from "../../helpers/fakes/index.ts";

let repo: InMemoryApiKeyRepository;
let service: ApiKeyService;

beforeEach(() => {
  repo = new InMemoryApiKeyRepository();
  service = new ApiKeyService(repo, { cacheTtlMs: 60_000 });
});

describe("ApiKeyService", () => {
  it("issues a key whose SHA-256 alone is stored, and authenticates it as its user", async () => {
    const { key, record } = await service.issue("alice", "laptop");
    expect(key).toMatch(/^ws_[A-Za-z0-9]{43}$/);
    expect(repo.records[0]?.hash).toBe(createHash("sha256").update(key).digest("hex"));
    expect(JSON.stringify(repo.records)).not.toContain(key);
    expect(await service.authenticate(key)).toEqual({ userId: "alice", keyId: record.id });
  });

  it("answers null for a missing, empty, over-long or unknown key without asking storage for malformed ones", async () => {
    await service.issue("alice");
    expect(await service.authenticate(undefined)).toBeNull();
    expect(await service.authenticate("")).toBeNull();
    expect(await service.authenticate("x".repeat(513))).toBeNull();
    expect(repo.lookUps).toBe(0);
    expect(await service.authenticate("ws_unknown")).toBeNull();
    expect(repo.lookUps).toBe(1);
  });

  it("caches positive authentications; revoking through the service takes effect at once", async () => {
    const { key, record } = await service.issue("alice");
    await service.authenticate(key);
    expect(service.authenticate(key)).toEqual({ userId: "alice", keyId: record.id }); // synchronous: cached
    expect(repo.lookUps).toBe(1);
    expect(await service.revoke(record.id)).toBe(true);
    expect(await service.authenticate(key)).toBeNull();
    expect(await service.revoke(record.id)).toBe(false); // already revoked
    expect(await service.revoke("nope")).toBe(false);
  });

  it("refuses invalid user ids", async () => {
    for (const bad of ["", "-x", "a b", "x".repeat(129)])
      await expect(service.issue(bad)).rejects.toThrow(/invalid user id/);
    expect(repo.records).toHaveLength(0);
    expect(ApiKeyService.isValidUserId("a.b_c@d-e")).toBe(true);
  });

  it("bootstrap: issues a first key only when none exists", async () => {
    const first = await service.bootstrap(undefined);
    expect(first?.record.userId).toBe(DEFAULT_USER);
    expect(await service.bootstrap(undefined)).toBeNull();
    expect(repo.records).toHaveLength(1);
  });

  it("bootstrap with SESSION_API_KEY: makes it a key of the default user, revoking a different earlier one", async () => {
    await service.bootstrap("env-one");
    expect(await service.authenticate("env-one")).toMatchObject({ userId: DEFAULT_USER });
    await service.bootstrap("env-one"); // the same key again: nothing new
    expect(repo.records).toHaveLength(1);
    await service.bootstrap("env-two");
    expect(await service.authenticate("env-one")).toBeNull();
    expect(await service.authenticate("env-two")).toMatchObject({ userId: DEFAULT_USER });
    // The first env key is revoked (no longer unrevoked), the second one is live.
    expect(repo.records.map((r) => [r.label, r.revokedAt === null])).toEqual([
      [ENV_KEY_LABEL, false],
      [ENV_KEY_LABEL, true],
    ]);
  });

  it("lists keys per user, oldest first", async () => {
    await service.issue("alice", "one");
    await service.issue("bob", "b");
    await service.issue("alice", "two");
    expect((await service.list("alice")).map((k) => k.label)).toEqual(["one", "two"]);
    expect(await service.list()).toHaveLength(3);
  });
});

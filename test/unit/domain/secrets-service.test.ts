// SecretsService over an in-memory user-data repository.
import { create } from "@bufbuild/protobuf";
import { Code, type ConnectError } from "@connectrpc/connect";
import { beforeEach, describe, expect, it } from "vitest";
import { ValidationError } from "../../../src/core/errors.ts";
import { SecretsService } from "../../../src/domain/secrets/secrets-service.ts";
import { UserDataStore } from "../../../src/domain/user-data-store.ts";
import {
  CreateSecretRequestSchema,
  DeleteSecretRequestSchema,
  UpdateSecretRequestSchema,
} from "../../../src/gen/workspace/v1/secrets_pb.js";
import { callAs, InMemoryUserDataRepository, testCrypto } from "../../helpers/fakes/index.ts";

let repo: InMemoryUserDataRepository;
let service: SecretsService;
const alice = callAs("alice");
const names = async (ctx = alice) => (await service.listSecrets({}, ctx)).customSecrets.map((s) => s.name);
const createSecret = (name: string, value: string, description?: string, ctx = alice) =>
  service.createSecret(
    create(CreateSecretRequestSchema, { name, value, ...(description === undefined ? {} : { description }) }),
    ctx,
  );
const failure = (p: Promise<unknown>) =>
  p.then(
    () => {
      throw new Error("expected a failure");
    },
    (e: unknown) => e as ConnectError,
  );

beforeEach(() => {
  repo = new InMemoryUserDataRepository();
  service = new SecretsService({ store: new UserDataStore(repo), box: testCrypto().box });
});

describe("SecretsService", () => {
  it("creates sealed secrets, lists names and descriptions in creation order, opens them for a start", async () => {
    await createSecret("B", "vb", "second letter");
    await createSecret("A", "va");
    expect((await service.listSecrets({}, alice)).customSecrets.map((s) => [s.name, s.description])).toEqual([
      ["B", "second letter"],
      ["A", ""],
    ]);
    expect(JSON.stringify(repo.peek("alice"))).not.toMatch(/"v[ab]"/);
    expect(await service.openAll("alice")).toEqual({ B: "vb", A: "va" });
  });

  it("ALREADY_EXISTS for a taken name; INVALID_ARGUMENT for an empty or too long name or value; nothing stored", async () => {
    await createSecret("A", "1");
    const writes = repo.writes;
    expect((await failure(createSecret("A", "2"))).code).toBe(Code.AlreadyExists);
    const empty = await failure(createSecret("", "x"));
    expect(empty).toBeInstanceOf(ValidationError);
    expect((empty as ValidationError).violations.map((v) => [v.type, v.loc])).toEqual([
      ["value_error", ["name"]],
    ]);
    const long = (await failure(createSecret("n".repeat(257), "x"))) as ValidationError;
    expect(long.violations[0]?.loc).toEqual(["name"]);
    const big = (await failure(createSecret("BIG", "x".repeat(64 * 1024 + 1)))) as ValidationError;
    expect(big.violations[0]).toMatchObject({ loc: ["value"], input: "<redacted>" });
    expect(repo.writes).toBe(writes);
    expect(await service.openAll("alice")).toEqual({ A: "1" });
  });

  it("update renames in place keeping the value; NOT_FOUND for an unknown id, ALREADY_EXISTS for a taken name", async () => {
    await createSecret("A", "va");
    await createSecret("B", "vb");
    await service.updateSecret(
      create(UpdateSecretRequestSchema, { secretId: "A", name: "C", description: "d" }),
      alice,
    );
    expect(await names()).toEqual(["C", "B"]); // the position is kept
    expect(await service.openAll("alice")).toEqual({ C: "va", B: "vb" });
    expect(
      (
        await failure(
          service.updateSecret(create(UpdateSecretRequestSchema, { secretId: "A", name: "X" }), alice),
        )
      ).code,
    ).toBe(Code.NotFound);
    expect(
      (
        await failure(
          service.updateSecret(create(UpdateSecretRequestSchema, { secretId: "C", name: "B" }), alice),
        )
      ).code,
    ).toBe(Code.AlreadyExists);
  });

  it("delete removes; a second delete is NOT_FOUND", async () => {
    await createSecret("A", "va");
    await service.deleteSecret(create(DeleteSecretRequestSchema, { secretId: "A" }), alice);
    expect(await names()).toEqual([]);
    const again = await failure(
      service.deleteSecret(create(DeleteSecretRequestSchema, { secretId: "A" }), alice),
    );
    expect(again.code).toBe(Code.NotFound);
    expect(again.rawMessage).toBe("Secret with ID A not found");
  });

  it("another user's secrets behave as absent", async () => {
    await createSecret("A", "va");
    const bob = callAs("bob");
    expect(await names(bob)).toEqual([]);
    expect(
      (await failure(service.deleteSecret(create(DeleteSecretRequestSchema, { secretId: "A" }), bob))).code,
    ).toBe(Code.NotFound);
    await createSecret("A", "bobs", undefined, bob); // the same name is free for bob
    expect(await service.openAll("alice")).toEqual({ A: "va" });
    expect(await service.openAll("bob")).toEqual({ A: "bobs" });
  });

  it("UNAUTHENTICATED without a caller", async () => {
    expect((await failure(service.listSecrets({}, callAs(null)))).code).toBe(Code.Unauthenticated);
  });
});

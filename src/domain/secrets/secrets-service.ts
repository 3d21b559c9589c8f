import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { requireCaller } from "../../core/context.ts";
import { alreadyExists, invalid, notFound } from "../../core/errors.ts";
import { setOwn } from "../../core/model/schema.ts";
import type { SecretBox } from "../../core/secret-box.ts";
import type {
  CreateSecretRequest,
  CreateSecretResponse,
  DeleteSecretRequest,
  DeleteSecretResponse,
  ListSecretsResponse,
  SecretsService as SecretsServiceDesc,
  UpdateSecretRequest,
  UpdateSecretResponse,
} from "../../gen/workspace/v1/secrets_pb.js";
import type { StoredCustomSecret } from "../../ports/user-data-repository.ts";
import type { UserDataStore } from "../user-data-store.ts";

const MAX_NAME = 256;
const MAX_VALUE = 64 * 1024;

/** Custom secrets of the caller: values are write-only and sealed at rest. */
export class SecretsService implements ServiceImpl<typeof SecretsServiceDesc> {
  readonly #store: UserDataStore;
  readonly #box: SecretBox;

  constructor(deps: { store: UserDataStore; box: SecretBox }) {
    this.#store = deps.store;
    this.#box = deps.box;
  }

  /** Names and descriptions, in creation order. */
  async listSecrets(_req: unknown, ctx: HandlerContext): Promise<ListSecretsResponse> {
    const { userId } = requireCaller(ctx);
    const secrets = (await this.#store.read(userId))?.value.customSecrets ?? {};
    return {
      $typeName: "workspace.v1.ListSecretsResponse",
      // Names and descriptions stored before strings had to be well-formed are shown with U+FFFD in place of a
      // lone surrogate; that name also finds the secret again (see storedName).
      customSecrets: Object.entries(secrets).map(([name, s]) => ({
        $typeName: "workspace.v1.CustomSecret",
        name: name.toWellFormed(),
        description: s.description.toWellFormed(),
      })),
    };
  }

  /** ALREADY_EXISTS "Secret NAME already exists" when the name is taken. */
  async createSecret(req: CreateSecretRequest, ctx: HandlerContext): Promise<CreateSecretResponse> {
    const { userId } = requireCaller(ctx);
    checkName(req.name, "name");
    if (req.value.length > MAX_VALUE)
      throw invalid(
        ["value"],
        `Secret value cannot exceed ${MAX_VALUE} characters`,
        "value_error",
        "<redacted>",
      );
    await this.#store.mutate(userId, (data) => {
      if (Object.hasOwn(data.customSecrets, req.name))
        throw alreadyExists(`Secret ${req.name} already exists`);
      // Any name is an ordinary key, `__proto__` included.
      setOwn(data.customSecrets, req.name, {
        secret: this.#box.seal(req.value, `${userId}:custom_secret`),
        description: req.description ?? "",
      });
    });
    return { $typeName: "workspace.v1.CreateSecretResponse", message: "Secret created successfully" };
  }

  /** Renames / re-describes; NOT_FOUND, or ALREADY_EXISTS when the new name is taken. */
  async updateSecret(req: UpdateSecretRequest, ctx: HandlerContext): Promise<UpdateSecretResponse> {
    const { userId } = requireCaller(ctx);
    checkName(req.name, "name");
    await this.#store.mutate(userId, (data) => {
      const id = storedName(data.customSecrets, req.secretId);
      const existing = id === undefined ? undefined : data.customSecrets[id];
      if (id === undefined || existing === undefined) {
        throw notFound(`Secret with ID ${req.secretId} not found`);
      }
      if (req.name !== id && Object.hasOwn(data.customSecrets, req.name)) {
        throw alreadyExists(`Secret ${req.name} already exists`);
      }
      const next: Record<string, StoredCustomSecret> = {};
      for (const [name, s] of Object.entries(data.customSecrets)) {
        if (name === id)
          setOwn(next, req.name, { secret: existing.secret, description: req.description ?? "" });
        else setOwn(next, name, s);
      }
      data.customSecrets = next;
    });
    return { $typeName: "workspace.v1.UpdateSecretResponse", message: "Secret updated successfully" };
  }

  /** NOT_FOUND "Secret with ID X not found" when absent. */
  async deleteSecret(req: DeleteSecretRequest, ctx: HandlerContext): Promise<DeleteSecretResponse> {
    const { userId } = requireCaller(ctx);
    await this.#store.mutate(userId, (data) => {
      const id = storedName(data.customSecrets, req.secretId);
      if (id === undefined) throw notFound(`Secret with ID ${req.secretId} not found`);
      delete data.customSecrets[id];
    });
    return { $typeName: "workspace.v1.DeleteSecretResponse", message: "Secret deleted successfully" };
  }

  /** Every custom secret of the user in plaintext (for passing into a new conversation). */
  async openAll(userId: string): Promise<Record<string, string>> {
    const secrets = (await this.#store.read(userId))?.value.customSecrets ?? {};
    return Object.fromEntries(
      Object.entries(secrets).map(([name, s]) => [name, this.#box.open(s.secret, `${userId}:custom_secret`)]),
    );
  }
}

/**
 * The stored key a secret id names: the id itself, or else a stored name that is not well-formed Unicode (stored
 * before that was refused) and that the id spells as listed, with U+FFFD in place of its lone surrogates. Such a
 * secret can thus be renamed or deleted through the API.
 */
function storedName(secrets: Record<string, StoredCustomSecret>, id: string): string | undefined {
  if (Object.hasOwn(secrets, id)) return id;
  return Object.keys(secrets).find((name) => !name.isWellFormed() && name.toWellFormed() === id);
}

function checkName(name: string, field: string): void {
  if (name.length === 0) throw invalid([field], "Secret name cannot be empty", "value_error", name);
  if (name.length > MAX_NAME)
    throw invalid([field], `Secret name cannot exceed ${MAX_NAME} characters`, "value_error", name);
}

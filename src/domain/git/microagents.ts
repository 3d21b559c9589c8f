/**
 * A repository's microagents as the reference scans them, read from the caller's providers: the list of
 * microagent files (ListMicroagents) and one file's content and triggers (GetMicroagentContent).
 */
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { type FieldViolation, ValidationError } from "../../core/errors.ts";
import { localRepositoryFolder } from "../../core/repository-names.ts";
import {
  type GetMicroagentContentRequest,
  type GetMicroagentContentResponse,
  GetMicroagentContentResponseSchema,
  type ListMicroagentsRequest,
  type ListMicroagentsResponse,
  ListMicroagentsResponseSchema,
  MicroagentSchema,
} from "../../gen/workspace/v1/git_pb.js";
import { GitProviderError } from "../../ports/git-provider.ts";
import { filePath, repositoryName } from "./git-requests.ts";
import { MicroagentParseError, parseMicroagent } from "./microagent-content.ts";
import type { ProviderAccess } from "./provider-access.ts";
import { throwTellingFailure } from "./provider-failures.ts";
import { TYPES } from "./provider-names.ts";

export class Microagents {
  readonly #providers: ProviderAccess;
  readonly #now: () => number;

  constructor(providers: ProviderAccess, now: () => number) {
    this.#providers = providers;
    this.#now = now;
  }

  /**
   * The reference's microagent scan: `.cursorrules` plus the .md files (README.md excepted) of `microagents/` in
   * a repository named `.openhands` or `openhands-config`, else of `.openhands/microagents/`. The first provider
   * with files answers; empty when the caller has no token (as the reference) or no provider has files;
   * UNAUTHENTICATED "Unable to fetch microagents for R" when every provider failed (a rate limit or an
   * unreachable provider is answered as such).
   */
  async listMicroagents(req: ListMicroagentsRequest, ctx: HandlerContext): Promise<ListMicroagentsResponse> {
    const issues: FieldViolation[] = [];
    const repository = repositoryName(req.repository, issues);
    if (issues.length > 0) throw new ValidationError(issues);
    // A local repository's files are not read here: it has none to show.
    if (localRepositoryFolder(repository) !== null) return create(ListMicroagentsResponseSchema, {});
    const tokens = await this.#providers.storedTokens(ctx);
    const name = repository.split("/").at(-1) ?? "";
    const folder =
      name === ".openhands" || name === "openhands-config" ? "microagents" : ".openhands/microagents";
    const createdAt = new Date(this.#now()).toISOString();
    const failures: unknown[] = [];
    for (const [p] of tokens) {
      try {
        const client = this.#providers.client(tokens, p, ctx.signal);
        const [cursor, files] = await Promise.all([
          client.hasFile(repository, ".cursorrules"),
          client.listFiles(repository, folder).catch((err: unknown) => {
            if (err instanceof GitProviderError && err.kind === "not_found") return [];
            throw err;
          }),
        ]);
        const found = [
          ...(cursor ? [{ name: "cursorrules", path: ".cursorrules" }] : []),
          ...files
            .filter((f) => f.name.endsWith(".md") && f.name !== "README.md")
            .map((f) => ({ name: f.name.replace(/\.md$/, ""), path: `${folder}/${f.name}` })),
        ];
        if (found.length === 0) continue;
        return create(ListMicroagentsResponseSchema, {
          microagents: found.map((m) => create(MicroagentSchema, { ...m, createdAt })),
        });
      } catch (err) {
        failures.push(err);
      }
    }
    throwTellingFailure(failures);
    if (failures.length === 0) return create(ListMicroagentsResponseSchema, {});
    throw new ConnectError(`Unable to fetch microagents for ${repository}`, Code.Unauthenticated);
  }

  /**
   * One microagent file, from the first provider that has it (the reference's MicroagentContentResponse). A
   * provider that lacks the file, cannot parse it or rejects the token is passed over; when none answers:
   * UNAUTHENTICATED "Microagent file F not found in R" (also with no token at all), except that a rate limit or an
   * unreachable provider is answered as such.
   */
  async getMicroagentContent(
    req: GetMicroagentContentRequest,
    ctx: HandlerContext,
  ): Promise<GetMicroagentContentResponse> {
    const issues: FieldViolation[] = [];
    const repository = repositoryName(req.repository, issues);
    const path = filePath(req.filePath, issues);
    if (issues.length > 0) throw new ValidationError(issues);
    const tokens = localRepositoryFolder(repository) !== null ? [] : await this.#providers.storedTokens(ctx);
    const failures: unknown[] = [];
    for (const [p] of tokens) {
      try {
        const text = await this.#providers.client(tokens, p, ctx.signal).readFile(repository, path);
        const parsed = parseMicroagent(path, text);
        return create(GetMicroagentContentResponseSchema, {
          content: parsed.content,
          path,
          triggers: parsed.triggers,
          gitProvider: TYPES[p],
        });
      } catch (err) {
        if (!(err instanceof MicroagentParseError)) failures.push(err);
      }
    }
    throwTellingFailure(failures);
    throw new ConnectError(`Microagent file ${path} not found in ${repository}`, Code.Unauthenticated);
  }
}

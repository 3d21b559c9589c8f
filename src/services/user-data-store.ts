import { Code, ConnectError } from "@connectrpc/connect";
import { cloneJson } from "../core/json-clone.ts";
import type { UserData, UserDataRepository, Versioned } from "../ports/user-data-repository.ts";

const EMPTY: UserData = { settings: null, providerTokens: {}, customSecrets: {} };

/**
 * Read-modify-write of a user's document with optimistic concurrency: the mutation is re-run on a fresh copy
 * whenever another writer got in first, so concurrent updates never lose a write.
 */
export class UserDataStore {
  readonly #repo: UserDataRepository;

  constructor(repo: UserDataRepository) {
    this.#repo = repo;
  }

  /** See UserDataRepository.changeToken. */
  changeToken(): number {
    return this.#repo.changeToken();
  }

  read(userId: string): Promise<Versioned<UserData> | null> {
    return this.#repo.get(userId);
  }

  /**
   * Applies `mutate` to a copy of the current document and stores the result. `mutate` may throw (nothing is
   * stored) or return the value to pass back to the caller. ABORTED after too many conflicting writers.
   */
  async mutate<R>(userId: string, mutate: (data: UserData) => R | Promise<R>): Promise<R> {
    for (let attempt = 0; attempt < 50; attempt++) {
      // The read for update is our own copy: the mutation edits it in place.
      const current = await this.#repo.get(userId, { forUpdate: true });
      const draft = current?.value ?? cloneJson(EMPTY);
      const returned = mutate(draft);
      const result = returned instanceof Promise ? await returned : returned;
      if (await this.#repo.compareAndSet(userId, current?.version ?? 0, draft)) return result;
      await new Promise((r) => setTimeout(r, Math.random() * Math.min(50, 2 ** attempt)));
    }
    throw new ConnectError("too many concurrent updates, try again", Code.Aborted);
  }
}

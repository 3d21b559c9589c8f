/**
 * Warm claims: taking a warm sandbox of the runtime's pool for a start of a user, within the user's sandbox cap and
 * claim rate. One job of the sandbox service (see SandboxService.start and newSandboxId), behind small ports.
 */
import { RateLimiter } from "../../core/rate-limiter.ts";
import type { SandboxRecord } from "../../ports/sandbox-repository.ts";
import type { RuntimeSpec, SandboxRuntime, WarmClaim } from "../../ports/sandbox-runtime.ts";
import type { SandboxLimits } from "./sandbox-limits.ts";

/**
 * How long a warm sandbox taken for a start counts against its user's cap before the start records it (a start that
 * never came, e.g. its server died: the count forgets it).
 */
const WARM_CLAIM_PENDING_MS = 60_000;
/** How long a start waits for the user's other starts between their warm claim and their record (see claim). */
const WARM_CLAIM_WAIT_MS = 2000;

/** What warm claims need of the runtime: its warm pool (both optional: a runtime without a pool claims nothing). */
export type WarmPool = Pick<SandboxRuntime, "claimWarm" | "claimedWarm">;

/** What warm claims need of the store: a user's sandbox records, to count them against the cap. */
export interface UserSandboxes {
  listAll(userId: string): Promise<readonly SandboxRecord[]>;
}

export interface WarmClaimsOptions {
  pool: WarmPool;
  records: UserSandboxes;
  /**
   * Sandboxes (any status) a user may have (maxPerUser), and warm sandboxes one user may take per minute, and at
   * most that many at once (warmClaimsPerMinute; 0: no limit).
   */
  limits: Pick<SandboxLimits, "maxPerUser" | "warmClaimsPerMinute">;
  log?: ((msg: string, data?: Record<string, unknown>) => void) | undefined;
}

/** Taking warm sandboxes for starts: what a start needs of them. */
export interface WarmClaiming {
  claim(spec: RuntimeSpec, userId: string): Promise<WarmClaim | null>;
  settled(userId: string, claimed: WarmClaim | null): void;
  claimed(id: string): Promise<WarmClaim | null>;
}

export class WarmClaims implements WarmClaiming {
  readonly #o: WarmClaimsOptions;
  /**
   * Per user, in arrival order, the starts of theirs on this server that are claiming a warm sandbox or took one
   * and are not yet recorded: when, and the sandbox id taken (null while the claim is in progress).
   */
  readonly #taken = new Map<string, Map<symbol, { at: number; sandboxId: string | null }>>();
  /** Each user's warm claims (warmClaimsPerMinute). */
  readonly #rate: RateLimiter;

  constructor(options: WarmClaimsOptions) {
    this.#o = options;
    const perMinute = options.limits.warmClaimsPerMinute;
    this.#rate = new RateLimiter(perMinute / 60, Math.max(1, perMinute));
  }

  /**
   * A warm sandbox of the spec taken for good for a start of `userId`, when the runtime has one ready (a failure
   * there: none). None when the user's sandbox cap would refuse the start anyway, counting their sandboxes and the
   * warm ones this server took for starts of theirs not yet recorded: a refused start removes what it took, so a
   * user at the cap could otherwise empty the pool for everyone with refused starts. None either past the user's
   * claim rate (warmClaimsPerMinute), which holds a start/delete loop within the cap. The start says {@link settled} once its
   * record is created or refused.
   */
  async claim(spec: RuntimeSpec, userId: string): Promise<WarmClaim | null> {
    if (this.#o.pool.claimWarm === undefined) return null;
    const now = Date.now();
    const taken = this.#taken.get(userId) ?? new Map<symbol, { at: number; sandboxId: string | null }>();
    for (const [k, v] of taken) if (now - v.at >= WARM_CLAIM_PENDING_MS) taken.delete(k);
    // Reserved before the count is read, in arrival order: concurrent starts of the user see the earlier ones.
    const reservation = Symbol("claim");
    const mine = { at: now, sandboxId: null as string | null };
    taken.set(reservation, mine);
    this.#taken.set(userId, taken);
    const ahead = (): number => {
      let n = 0;
      for (const k of taken.keys()) {
        if (k === reservation) break;
        n++;
      }
      return n;
    };
    const max = this.#o.limits.maxPerUser;
    let claim: WarmClaim | null = null;
    try {
      let records = (await this.#o.records.listAll(userId)).length;
      // Earlier starts of the user between their claim and their record fill the cap: wait for them (briefly)
      // rather than overtake them cold, which would get one of theirs refused and its warm sandbox removed.
      const until = Date.now() + WARM_CLAIM_WAIT_MS;
      while (records < max && ahead() + records >= max && Date.now() < until) {
        const pending = taken.size;
        await new Promise((r) => setTimeout(r, 10));
        if (taken.size !== pending) records = (await this.#o.records.listAll(userId)).length;
      }
      // Within the user's claim rate, which counts only what was taken (a claim that finds the pool empty costs
      // nothing); concurrent starts of the user may pass the check together, at most the cap's room of them.
      if (ahead() + records < max && this.#rate.has(userId)) {
        claim = (await this.#o.pool.claimWarm(spec)) ?? null;
        if (claim !== null) this.#rate.spend(userId);
      }
    } catch (err) {
      this.#o.log?.("warm sandbox could not be claimed: starting cold", { error: String(err) });
    } finally {
      if (claim === null) taken.delete(reservation);
      else mine.sandboxId = claim.sandboxId;
      if (taken.size === 0) this.#taken.delete(userId);
    }
    return claim;
  }

  /** The start of `userId` that took `claimed` (or found it under its id) has its record, or was refused. */
  settled(userId: string, claimed: WarmClaim | null): void {
    const taken = this.#taken.get(userId);
    if (claimed === null || taken === undefined) return;
    for (const [k, v] of taken) if (v.sandboxId === claimed.sandboxId) taken.delete(k);
    if (taken.size === 0) this.#taken.delete(userId);
  }

  /** The warm sandbox taken under `id` by a start's newSandboxId (on any server), else null. */
  async claimed(id: string): Promise<WarmClaim | null> {
    const key = (await this.#o.pool.claimedWarm?.(id)) ?? null;
    return key === null ? null : { sandboxId: id, sessionApiKey: key };
  }
}

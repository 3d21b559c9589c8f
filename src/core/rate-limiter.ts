import { resourceExhausted } from "./errors.ts";

/**
 * Token bucket per key id: `perSecond` sustained, `burst` at once. `admit` throws RESOURCE_EXHAUSTED (429 with
 * Retry-After in REST) when a key is over its limit. perSecond 0 disables limiting.
 */
export class RateLimiter {
  readonly #rate: number;
  readonly #burst: number;
  readonly #buckets = new Map<string, { tokens: number; at: number }>();

  constructor(perSecond: number, burst: number) {
    this.#rate = perSecond;
    this.#burst = burst;
  }

  admit(keyId: string, now: number = performance.now()): void {
    this.take(keyId, 1, now);
  }

  /** Whether `take(keyId, cost)` would succeed now (takes nothing). */
  has(keyId: string, cost = 1, now: number = performance.now()): boolean {
    if (this.#rate === 0) return true;
    const b = this.#buckets.get(keyId);
    if (b === undefined) return true;
    return (
      Math.min(this.#burst, b.tokens + ((now - b.at) / 1000) * this.#rate) >= Math.min(cost, this.#burst)
    );
  }

  /** Takes one token when there is one, else none (never throws): for a use already made that must be counted. */
  spend(keyId: string, now: number = performance.now()): void {
    if (this.has(keyId, 1, now)) this.take(keyId, 1, now);
  }

  /**
   * Takes `cost` tokens (at most the burst: a cost above it waits for a full bucket) or throws RESOURCE_EXHAUSTED
   * with `message`, taking none.
   */
  take(keyId: string, cost: number, now: number = performance.now(), message = "Too many requests"): void {
    if (this.#rate === 0) return;
    const need = Math.min(cost, this.#burst);
    let b = this.#buckets.get(keyId);
    if (b === undefined) {
      if (this.#buckets.size > 100_000) this.#buckets.clear();
      b = { tokens: this.#burst, at: now };
      this.#buckets.set(keyId, b);
    }
    b.tokens = Math.min(this.#burst, b.tokens + ((now - b.at) / 1000) * this.#rate);
    b.at = now;
    if (b.tokens < need) throw resourceExhausted(message);
    b.tokens -= need;
  }
}

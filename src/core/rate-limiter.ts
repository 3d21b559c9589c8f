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
    if (this.#rate === 0) return;
    let b = this.#buckets.get(keyId);
    if (b === undefined) {
      if (this.#buckets.size > 100_000) this.#buckets.clear();
      b = { tokens: this.#burst, at: now };
      this.#buckets.set(keyId, b);
    }
    b.tokens = Math.min(this.#burst, b.tokens + ((now - b.at) / 1000) * this.#rate);
    b.at = now;
    if (b.tokens < 1) throw resourceExhausted("Too many requests");
    b.tokens -= 1;
  }
}

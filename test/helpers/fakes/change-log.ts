import type { ChangeEntry, ChangeLog, ChangeRecord } from "../../../src/ports/change-log.ts";

/** In-memory ChangeLog: what one store's log does, for service tests without a database. */
export class InMemoryChangeLog implements ChangeLog {
  readonly entries: ChangeRecord[] = [];
  #seq = 0;
  #floor = 0;

  async append(entries: readonly ChangeEntry[]): Promise<number[]> {
    return this.record(entries);
  }

  /** Appends at once (the in-memory repositories log their changes with them, as the adapters do). */
  record(entries: readonly ChangeEntry[]): number[] {
    return entries.map((e) => {
      const record = { ...e, seq: ++this.#seq, at: new Date() };
      this.entries.push(record);
      return record.seq;
    });
  }

  async read(after: number, limit: number): Promise<ChangeRecord[]> {
    return this.entries.filter((e) => e.seq > after).slice(0, limit);
  }

  async head(): Promise<number> {
    return this.#seq;
  }

  async floor(): Promise<number> {
    return this.#floor;
  }

  async prune(before: Date, keep?: number): Promise<number> {
    const head = this.#seq;
    const kept = this.entries.filter(
      (e) => e.at.getTime() >= before.getTime() && (keep === undefined || e.seq > head - keep),
    );
    const pruned = this.entries.length - kept.length;
    if (pruned > 0) this.#floor = (this.entries[pruned - 1] as ChangeRecord).seq;
    this.entries.splice(0, this.entries.length, ...kept);
    return pruned;
  }
}

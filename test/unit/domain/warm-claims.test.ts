// WarmClaims alone, over in-memory fakes of its small interfaces (a warm pool, a user's records): a warm sandbox
// is taken only within the user's sandbox cap, counting the ones taken for starts not yet recorded, and within the
// user's claim rate, which counts only what was taken.
import { describe, expect, it } from "vitest";
import { sandboxLimits } from "../../../src/domain/sandboxes/sandbox-limits.ts";
import { WarmClaims, type WarmPool } from "../../../src/domain/sandboxes/warm-claims.ts";
import type { SandboxRecord } from "../../../src/ports/sandbox-repository.ts";
import type { RuntimeSpec, WarmClaim } from "../../../src/ports/sandbox-runtime.ts";

const SPEC = { command: ["agent"] } as unknown as RuntimeSpec;

/** A pool handing out w0, w1, … (while `empty` is false), and the users' records by owner. */
function setup(settings: { maxPerUser?: number; warmClaimsPerMinute?: number }, pool?: WarmPool) {
  const state = { empty: false, next: 0, claims: 0 };
  const records = new Map<string, SandboxRecord[]>();
  const logs: string[] = [];
  const fakePool: WarmPool = pool ?? {
    async claimWarm(): Promise<WarmClaim | null> {
      state.claims++;
      if (state.empty) return null;
      return { sandboxId: `w${state.next++}`, sessionApiKey: "k" };
    },
    async claimedWarm(id) {
      return id === "w9" ? "key-of-w9" : null;
    },
  };
  const claims = new WarmClaims({
    pool: fakePool,
    records: { listAll: async (userId) => records.get(userId) ?? [] },
    limits: sandboxLimits(settings),
    log: (msg) => logs.push(msg),
  });
  const addRecord = (userId: string, id: string) =>
    records.set(userId, [...(records.get(userId) ?? []), { id } as SandboxRecord]);
  return { claims, state, addRecord, logs };
}

describe("WarmClaims", () => {
  it("takes none for a user at the cap (without asking the pool); another user still takes one", async () => {
    const { claims, state, addRecord } = setup({ maxPerUser: 2 });
    addRecord("alice", "a");
    addRecord("alice", "b");
    expect(await claims.claim(SPEC, "alice")).toBeNull();
    expect(state.claims).toBe(0);
    expect(await claims.claim(SPEC, "bob")).toEqual({ sandboxId: "w0", sessionApiKey: "k" });
  });

  it("counts a claim not yet recorded against the cap until its start settles with its record", async () => {
    const { claims, addRecord } = setup({ maxPerUser: 1 });
    const first = await claims.claim(SPEC, "alice");
    expect(first?.sandboxId).toBe("w0");
    // The second start waits for the first (it would fill the cap): the first records its sandbox and settles.
    const second = claims.claim(SPEC, "alice");
    setTimeout(() => {
      addRecord("alice", "w0");
      claims.settled("alice", first);
    }, 30);
    expect(await second).toBeNull();
  });

  it("frees the cap's room of a claim whose start settled without a record (refused)", async () => {
    const { claims } = setup({ maxPerUser: 1 });
    const first = await claims.claim(SPEC, "alice");
    claims.settled("alice", first);
    expect((await claims.claim(SPEC, "alice"))?.sandboxId).toBe("w1");
  });

  it("holds each user to the claim rate; a claim finding the pool empty costs nothing", async () => {
    const { claims, state } = setup({ maxPerUser: 100, warmClaimsPerMinute: 2 });
    state.empty = true;
    expect(await claims.claim(SPEC, "alice")).toBeNull();
    state.empty = false;
    const taken = [await claims.claim(SPEC, "alice"), await claims.claim(SPEC, "alice")];
    for (const t of taken) claims.settled("alice", t);
    expect(taken.map((t) => t?.sandboxId)).toEqual(["w0", "w1"]);
    expect(await claims.claim(SPEC, "alice")).toBeNull();
    expect((await claims.claim(SPEC, "bob"))?.sandboxId).toBe("w2");
  });

  it("takes none from a runtime without a pool, nor when the pool fails (logged)", async () => {
    expect(await setup({}, {}).claims.claim(SPEC, "alice")).toBeNull();
    const failing = setup(
      {},
      {
        claimWarm: async () => {
          throw new Error("pool broken");
        },
      },
    );
    expect(await failing.claims.claim(SPEC, "alice")).toBeNull();
    expect(failing.logs).toEqual(["warm sandbox could not be claimed: starting cold"]);
  });

  it("finds a warm sandbox taken under an id by any server, with its key", async () => {
    const { claims } = setup({});
    expect(await claims.claimed("w9")).toEqual({ sandboxId: "w9", sessionApiKey: "key-of-w9" });
    expect(await claims.claimed("w8")).toBeNull();
  });
});

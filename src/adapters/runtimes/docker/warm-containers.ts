/**
 * Warm containers: sandbox containers the Docker runtime creates, starts and waits healthy ahead of need, so that
 * a start does not wait for the agent-server to boot (seconds for the OpenHands agent-server). Each is made for a
 * sandbox id chosen when it is warmed: its session key, webhook URL, published ports, volume and labels are fixed
 * then, and nothing of a user is in it (a conversation's secrets reach the agent with its start request).
 *
 * The engine says who is what, so that every server sharing it agrees without talking to the others:
 * - `<warm prefix><id>` (default `oh-warm-<id>`), labelled `<prefix>warm=true`, `<prefix>warm.config=<hash of the
 *   spec and runtime options>`: an unclaimed warm container;
 * - `<sandbox prefix><id>` (the name of any sandbox container) with the same labels: a claimed one.
 *
 * A claim renames `<warm prefix><id>` to `<sandbox prefix><id>`. The engine resolves the old name, then takes the
 * container's lock and refuses a rename to the name it already has; so of any number of concurrent claims (on
 * any server) exactly one succeeds, and the others fail (404: no container of the old name; 400: already renamed).
 * Every taker uses that same target name (a removal of a live warm container claims it first), which is what
 * makes this hold: two different targets could both succeed. A claimed container never becomes warm again.
 */
import { createHash } from "node:crypto";
import type Docker from "dockerode";
import type { ContainerInfo, ContainerInspectInfo } from "dockerode";
import { base62, newSessionKey } from "../../../core/ids.ts";
import type { RuntimeHandle, RuntimeSpec, WarmClaim, WarmPlan } from "../../../ports/sandbox-runtime.ts";

/** Stands for the sandbox id in the spec a warm container runs, when its configuration is compared. */
const ID_PLACEHOLDER = "{sandbox_id}";
/** Delay of a refill after a claim: the claimed sandbox's first work goes before the engine's container start. */
const REFILL_DELAY_MS = 200;
/** Longest pause between attempts while the engine keeps failing. */
const MAX_BACKOFF_MS = 60_000;
/** A claim of this server younger than this is started without asking the engine again whether it runs. */
const FRESH_CLAIM_MS = 1000;
/** A claim of this server that no start took within this time is left to the sweep. */
const CLAIM_GRACE_MS = 10 * 60_000;

export interface WarmContainersOptions {
  docker: Docker;
  /** Warm containers kept per spec (0: none; those found are removed). */
  size: number;
  /** Containers being warmed at once, all specs together. */
  concurrency: number;
  /** Label prefix of the runtime (`<prefix>managed`, ...). */
  prefix: string;
  /** The runtime's extra labels: only containers carrying them are this runtime's. */
  extraLabels: Record<string, string>;
  /** Name prefix of unclaimed warm containers. */
  warmNamePrefix: string;
  /** Name prefix of sandbox containers (the name a claim gives). */
  sandboxNamePrefix: string;
  /** The runtime options that shape a container (network, user, limits...): part of a warm configuration. */
  fingerprint: string;
  /** How long a warm container may take to answer its health check before it is removed. */
  readyTimeoutMs: number;
  /** The image's id (pulled when missing). */
  imageId(image: string): Promise<string>;
  /** Creates and starts a sandbox container of this name with these labels beside the runtime's. */
  create(args: {
    sandboxId: string;
    spec: RuntimeSpec;
    sessionApiKey: string;
    containerName: string;
    labels: Record<string, string>;
  }): Promise<RuntimeHandle>;
  /** True when the sandbox answers its health check now. */
  alive(handle: RuntimeHandle): Promise<boolean>;
  /** Resolves true once the sandbox answers, false after `timeoutMs` or once `stop()` says so. */
  waitHealthy(handle: RuntimeHandle, timeoutMs: number, stop: () => boolean): Promise<boolean>;
  /** Stops and removes a container and its volume. */
  remove(containerId: string, volume: string | undefined, paused: boolean): Promise<void>;
  log: (msg: string, data?: object) => void;
}

/** A warm container as a claim hands it over. */
interface Warm {
  sandboxId: string;
  containerId: string;
  sessionApiKey: string;
  /** Its handle under its claimed name. */
  handle: RuntimeHandle;
}

interface Pool {
  hash: string;
  spec: RuntimeSpec;
  /** Healthy unclaimed containers, oldest first (some may have been claimed by another server meanwhile). */
  ready: Warm[];
  /** Containers being created or waited for. */
  starting: number;
}

/** The warm pool of one Docker runtime instance (see the file's comment). */
export class WarmContainers {
  readonly #o: WarmContainersOptions;
  readonly #warmLabel: string;
  readonly #configLabel: string;
  readonly #imageLabel: string;
  #plan: WarmPlan | null = null;
  #pools = new Map<string, Pool>();
  /** This server's claims not yet started, by sandbox id. */
  readonly #claimed = new Map<string, { warm: Warm; at: number }>();
  /** Claimed containers without a record at the last sweep (removed when the next sweep finds the same). */
  #unrecorded = new Set<string>();
  readonly #inFlight = new Set<Promise<void>>();
  #failures = 0;
  #retryAt = 0;
  #timer: { at: number; timer: NodeJS.Timeout } | null = null;
  #closed = false;

  constructor(options: WarmContainersOptions) {
    this.#o = options;
    this.#warmLabel = `${options.prefix}warm`;
    this.#configLabel = `${options.prefix}warm.config`;
    this.#imageLabel = `${options.prefix}warm.image`;
  }

  /** Warm containers ready to be claimed now (all specs). */
  get ready(): number {
    let n = 0;
    for (const pool of this.#pools.values()) n += pool.ready.length;
    return n;
  }

  /** Adopts or removes the warm containers found on the engine, then fills the pool in the background. */
  async configure(plan: WarmPlan): Promise<void> {
    this.#plan = plan;
    this.#pools = new Map();
    if (this.#o.size > 0)
      for (const spec of plan.specs) {
        const hash = this.#hashOf(spec);
        if (!this.#pools.has(hash)) this.#pools.set(hash, { hash, spec, ready: [], starting: 0 });
      }
    await this.#adopt();
    this.fill();
  }

  /** Takes a warm container of `spec` for good; null when none is ready. */
  async claim(spec: RuntimeSpec): Promise<WarmClaim | null> {
    if (this.#plan === null || this.#closed) return null;
    const pool = this.#pools.get(this.#hashOf(spec));
    if (pool === undefined) return null;
    try {
      for (let warm = pool.ready.shift(); warm !== undefined; warm = pool.ready.shift()) {
        if (!(await this.#take(warm.sandboxId))) continue; // another server's claim, or gone
        // Its agent answers (a fresh connection, ~1 ms): a container that died or hangs is never handed out.
        if (!(await this.#o.alive(warm.handle))) {
          this.#o.log("claimed warm container did not answer: removed", { sandboxId: warm.sandboxId });
          void this.#remove(warm.containerId, null);
          continue;
        }
        this.#claimed.set(warm.sandboxId, { warm, at: Date.now() });
        return { sandboxId: warm.sandboxId, sessionApiKey: warm.sessionApiKey };
      }
      return null;
    } finally {
      this.#fillAfter(REFILL_DELAY_MS);
    }
  }

  /** The session key of a container claimed under `sandboxId` (by any server) and not yet started, else null. */
  async claimedKey(sandboxId: string): Promise<string | null> {
    const own = this.#claimed.get(sandboxId);
    if (own !== undefined) return own.warm.sessionApiKey;
    if (this.#plan === null || this.#o.size <= 0) return null;
    const found = await this.#findClaimed(sandboxId);
    if (found === null) return null;
    this.#claimed.set(sandboxId, { warm: found, at: Date.now() });
    return found.sessionApiKey;
  }

  /**
   * The handle of the container claimed under `sandboxId` when its session key is `sessionApiKey` and it still
   * runs, for the start of that sandbox; null otherwise (start cold: a claimed container that cannot serve this
   * start is removed, since its name is the sandbox's).
   */
  async take(sandboxId: string, sessionApiKey: string): Promise<RuntimeHandle | null> {
    const own = this.#claimed.get(sandboxId);
    this.#claimed.delete(sandboxId);
    // Claimed here a moment ago, and seen running then: no need to ask the engine again.
    if (own !== undefined && Date.now() - own.at < FRESH_CLAIM_MS && own.warm.sessionApiKey === sessionApiKey)
      return own.warm.handle;
    let warm = own?.warm ?? null;
    if (warm === null && this.#plan !== null && this.#o.size > 0) warm = await this.#findClaimed(sandboxId);
    if (warm === null) return null;
    const info = await this.#inspect(warm.containerId);
    if (info?.State.Running && !info.State.Paused && warm.sessionApiKey === sessionApiKey) return warm.handle;
    this.#o.log("claimed warm container cannot serve its start: removed, starting cold", { sandboxId });
    await this.#remove(warm.containerId, info);
    return null;
  }

  /** Forgets this server's claim under `sandboxId` (its container is being removed). */
  forget(sandboxId: string): void {
    this.#claimed.delete(sandboxId);
  }

  /**
   * Removes dead warm containers, claimed ones without a sandbox record on two sweeps in a row, and warm ones
   * beyond the pool's size (servers sharing the engine may together make more); then fills the pool.
   */
  async sweep(hasRecord: (sandboxId: string) => Promise<boolean>): Promise<void> {
    // Before the plan (the start-up reconciliation) nothing is known of this server's configuration yet.
    if (this.#plan === null || this.#closed) return;
    const now = Date.now();
    for (const [id, c] of this.#claimed) if (now - c.at > CLAIM_GRACE_MS) this.#claimed.delete(id);
    const unrecorded = new Set<string>();
    const live = new Map<string, ContainerInfo[]>();
    for (const c of await this.#list()) {
      const name = nameOf(c);
      const sandboxId = c.Labels[`${this.#o.prefix}sandbox.id`] ?? "";
      if (name === `${this.#o.warmNamePrefix}${sandboxId}`) {
        if (c.State === "running") {
          const same = live.get(c.Labels[this.#configLabel] ?? "") ?? [];
          same.push(c);
          live.set(c.Labels[this.#configLabel] ?? "", same);
        } else if (c.State !== "created" && c.State !== "restarting") {
          this.#o.log("dead warm container removed", { sandboxId, state: c.State });
          await this.#remove(c.Id, null);
        }
      } else if (name === `${this.#o.sandboxNamePrefix}${sandboxId}`) {
        if (this.#claimed.has(sandboxId) || (await hasRecord(sandboxId))) continue;
        if (!this.#unrecorded.has(sandboxId)) {
          unrecorded.add(sandboxId);
          continue;
        }
        this.#o.log("claimed warm container that no sandbox took: removed", { sandboxId });
        await this.#remove(c.Id, null);
      }
    }
    this.#unrecorded = unrecorded;
    for (const pool of this.#pools.values()) {
      const running = live.get(pool.hash) ?? [];
      const ids = new Set(running.map((c) => c.Id));
      pool.ready = pool.ready.filter((w) => ids.has(w.containerId));
      // Beyond the size: the newest go (claimed first, so that no claim in progress loses its container).
      running.sort((a, b) => a.Created - b.Created);
      for (const c of running.slice(this.#o.size)) {
        const sandboxId = c.Labels[`${this.#o.prefix}sandbox.id`] ?? "";
        pool.ready = pool.ready.filter((w) => w.containerId !== c.Id);
        if (await this.#take(sandboxId)) {
          this.#o.log("warm container beyond the pool's size removed", { sandboxId });
          await this.#remove(c.Id, null);
        }
      }
    }
    // Of another configuration (or of a pool now 0): taken and removed.
    for (const [hash, cs] of live) if (!this.#pools.has(hash)) for (const c of cs) await this.#discard(c);
    this.fill();
  }

  /** Starts warm containers until each pool has its size ready or starting (bounded; backs off on failures). */
  fill(): void {
    if (this.#closed || this.#plan === null) return;
    const wait = this.#retryAt - Date.now();
    if (wait > 0) {
      this.#fillAfter(wait);
      return;
    }
    for (const pool of this.#pools.values())
      while (pool.ready.length + pool.starting < this.#o.size && this.#inFlight.size < this.#o.concurrency)
        this.#warmOne(pool);
  }

  /** No more containers are warmed; waits for those being created (the warm ones stay, for the next server). */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== null) clearTimeout(this.#timer.timer);
    await Promise.allSettled([...this.#inFlight]);
  }

  #fillAfter(ms: number): void {
    const at = Date.now() + ms;
    if (this.#closed || (this.#timer !== null && this.#timer.at <= at)) return;
    if (this.#timer !== null) clearTimeout(this.#timer.timer);
    const timer = setTimeout(() => {
      this.#timer = null;
      this.fill();
    }, ms);
    timer.unref();
    this.#timer = { at, timer };
  }

  #warmOne(pool: Pool): void {
    const plan = this.#plan;
    if (plan === null) return;
    pool.starting++;
    const sandboxId = base62(22);
    const sessionApiKey = newSessionKey(sandboxId);
    let handle: RuntimeHandle | null = null;
    const done: Promise<void> = (async () => {
      const imageId = await this.#o.imageId(pool.spec.id);
      handle = await this.#o.create({
        sandboxId,
        spec: plan.prepare(pool.spec, sandboxId),
        sessionApiKey,
        containerName: `${this.#o.warmNamePrefix}${sandboxId}`,
        labels: { [this.#warmLabel]: "true", [this.#configLabel]: pool.hash, [this.#imageLabel]: imageId },
      });
      if (!(await this.#o.waitHealthy(handle, this.#o.readyTimeoutMs, () => this.#closed))) {
        if (this.#closed) return; // left for the next server, which waits for it
        throw new Error(`it did not answer within ${this.#o.readyTimeoutMs} ms`);
      }
      const containerId = String(handle.data.containerId);
      pool.ready.push({
        sandboxId,
        containerId,
        sessionApiKey,
        handle: this.#claimedHandle(handle, sandboxId),
      });
      this.#failures = 0;
    })()
      .catch(async (e: unknown) => {
        this.#failures++;
        const backoff = Math.min(MAX_BACKOFF_MS, 1000 * 2 ** (this.#failures - 1));
        this.#retryAt = Date.now() + backoff;
        this.#o.log("warm container could not be started", { error: String(e), retryInMs: backoff });
        const id = handle === null ? "" : String((handle as RuntimeHandle).data.containerId);
        if (id !== "") await this.#remove(id, null);
      })
      .finally(() => {
        pool.starting--;
        this.#inFlight.delete(done);
        this.fill();
      });
    this.#inFlight.add(done);
  }

  /** Adopts the running warm containers of this configuration (up to the size), removes the others. */
  async #adopt(): Promise<void> {
    const imageIds = new Map<string, string>();
    for (const c of await this.#list()) {
      const sandboxId = c.Labels[`${this.#o.prefix}sandbox.id`] ?? "";
      if (nameOf(c) !== `${this.#o.warmNamePrefix}${sandboxId}`) continue; // claimed: the sweep decides
      const pool = this.#pools.get(c.Labels[this.#configLabel] ?? "");
      let adopted = false;
      if (pool !== undefined && c.State === "running" && pool.ready.length + pool.starting < this.#o.size) {
        const imageId =
          imageIds.get(pool.spec.id) ?? (await this.#o.imageId(pool.spec.id).catch(() => "unknown"));
        imageIds.set(pool.spec.id, imageId);
        const warm = c.Labels[this.#imageLabel] === imageId ? await this.#warmOf(c.Id) : null;
        if (warm !== null) {
          adopted = true;
          pool.starting++;
          const done: Promise<void> = this.#o
            .waitHealthy(warm.handle, this.#o.readyTimeoutMs, () => this.#closed)
            .then(async (ok) => {
              if (ok) pool.ready.push(warm);
              else if (!this.#closed) await this.#discard(c);
            })
            .finally(() => {
              pool.starting--;
              this.#inFlight.delete(done);
            });
          this.#inFlight.add(done);
        }
      }
      if (!adopted) await this.#discard(c);
    }
    const ready = [...this.#pools.values()].reduce((n, p) => n + p.starting, 0);
    if (ready > 0) this.#o.log("warm containers of an earlier server adopted", { count: ready });
  }

  /** A claimed container of this runtime named for `sandboxId`, not yet started as a sandbox by this server. */
  async #findClaimed(sandboxId: string): Promise<Warm | null> {
    if (!/^[A-Za-z0-9]{1,64}$/.test(sandboxId)) return null;
    const warm = await this.#warmOf(`${this.#o.sandboxNamePrefix}${sandboxId}`);
    return warm?.sandboxId === sandboxId ? warm : null;
  }

  /** The warm container `ref` (id or name) of this runtime, as a claim hands it over; null when it is not one. */
  async #warmOf(ref: string): Promise<Warm | null> {
    const info = await this.#inspect(ref);
    const labels = info?.Config.Labels ?? {};
    if (info === null || labels[this.#warmLabel] !== "true" || !this.#ours(labels)) return null;
    const sandboxId = labels[`${this.#o.prefix}sandbox.id`] ?? "";
    const sessionApiKey = (info.Config.Env ?? [])
      .find((e) => e.startsWith("OH_SESSION_API_KEYS_0="))
      ?.slice("OH_SESSION_API_KEYS_0=".length);
    const handle = parseHandleLabel(labels[`${this.#o.prefix}handle`]);
    if (sandboxId === "" || !sessionApiKey || handle === null) return null;
    return {
      sandboxId,
      containerId: info.Id,
      sessionApiKey,
      handle: this.#claimedHandle({ ...handle, data: { ...handle.data, containerId: info.Id } }, sandboxId),
    };
  }

  /** The handle of a warm container under the name its claim gives it. */
  #claimedHandle(handle: RuntimeHandle, sandboxId: string): RuntimeHandle {
    return { ...handle, data: { ...handle.data, containerName: `${this.#o.sandboxNamePrefix}${sandboxId}` } };
  }

  /** Claims the warm container of `sandboxId` (see the file's comment); false when another taker was first. */
  async #take(sandboxId: string): Promise<boolean> {
    try {
      await this.#o.docker
        .getContainer(`${this.#o.warmNamePrefix}${sandboxId}`)
        .rename({ name: `${this.#o.sandboxNamePrefix}${sandboxId}` });
      return true;
    } catch {
      return false;
    }
  }

  /** Takes a live warm container and removes it (a claim that loses to another is fine: that one is used). */
  async #discard(c: ContainerInfo): Promise<void> {
    const sandboxId = c.Labels[`${this.#o.prefix}sandbox.id`] ?? "";
    if (c.State === "running" && !(await this.#take(sandboxId))) return;
    await this.#remove(c.Id, null);
    this.#o.log("warm container of another configuration removed", { sandboxId });
  }

  async #remove(containerId: string, info: ContainerInspectInfo | null): Promise<void> {
    try {
      const known = info ?? (await this.#inspect(containerId));
      if (known === null) return;
      await this.#o.remove(
        containerId,
        known.Config.Labels?.[`${this.#o.prefix}volume`],
        known.State.Paused === true,
      );
    } catch (e: unknown) {
      this.#o.log("warm container could not be removed", { containerId, error: String(e) });
    }
  }

  async #inspect(ref: string): Promise<ContainerInspectInfo | null> {
    try {
      return await this.#o.docker.getContainer(ref).inspect();
    } catch {
      return null;
    }
  }

  /** Every warm container of this runtime (claimed or not). */
  async #list(): Promise<ContainerInfo[]> {
    const labels = [
      `${this.#o.prefix}managed=true`,
      `${this.#warmLabel}=true`,
      ...Object.entries(this.#o.extraLabels).map(([k, v]) => `${k}=${v}`),
    ];
    return this.#o.docker.listContainers({ all: true, filters: { label: labels } });
  }

  #ours(labels: Record<string, string>): boolean {
    if (labels[`${this.#o.prefix}managed`] !== "true") return false;
    return Object.entries(this.#o.extraLabels).every(([k, v]) => labels[k] === v);
  }

  /** The configuration a container of `spec` runs under (its sandbox id aside). */
  #hashOf(spec: RuntimeSpec): string {
    const prepared = this.#plan?.prepare(spec, ID_PLACEHOLDER) ?? spec;
    return createHash("sha256")
      .update(this.#o.fingerprint)
      .update("\0")
      .update(
        JSON.stringify([prepared.id, prepared.command, prepared.workingDir, sorted(prepared.initialEnv)]),
      )
      .digest("hex")
      .slice(0, 32);
  }
}

function sorted(env: Record<string, string>): [string, string][] {
  return Object.entries(env).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** A container's name without the engine's leading slash. */
function nameOf(c: ContainerInfo): string {
  return (c.Names[0] ?? "").replace(/^\//, "");
}

/** The handle a container was created with (its `<prefix>handle` label), without its container id. */
function parseHandleLabel(label: string | undefined): RuntimeHandle | null {
  if (label === undefined) return null;
  try {
    const h = JSON.parse(label) as Partial<RuntimeHandle>;
    if (typeof h.agentUrl !== "string" || typeof h.port !== "number" || typeof h.data !== "object" || !h.data)
      return null;
    return h as RuntimeHandle;
  } catch {
    return null;
  }
}

/** The images of Docker sandboxes: inspected, and pulled first when the engine does not have them. */
import type Docker from "dockerode";
import type { ImageInspectInfo } from "dockerode";
import { statusOf } from "./managed-containers.ts";

/** One progress event of an image pull, as the Docker engine streams it. */
export interface PullProgressEvent {
  status?: string;
  id?: string;
  progress?: string;
  error?: string;
}

/** The images a Docker runtime runs: one pull at a time per image, whoever asks. */
export class DockerImages {
  readonly #docker: Docker;
  readonly #log: (msg: string, data?: object) => void;
  readonly #onPullProgress: (image: string, event: PullProgressEvent) => void;
  readonly #pulls = new Map<string, Promise<ImageInspectInfo>>();

  constructor(
    docker: Docker,
    log: (msg: string, data?: object) => void,
    /** Pull progress (default: logged on each status change). */
    onPullProgress?: (image: string, event: PullProgressEvent) => void,
  ) {
    this.#docker = docker;
    this.#log = log;
    this.#onPullProgress = onPullProgress ?? pullLogger(log);
  }

  /** The image's configuration (its user, default command), pulled first when it is missing. */
  ensure(image: string): Promise<ImageInspectInfo> {
    const pending = this.#pulls.get(image);
    if (pending) return pending;
    const pull = this.#inspectOrPull(image).finally(() => this.#pulls.delete(image));
    this.#pulls.set(image, pull);
    return pull;
  }

  async #inspectOrPull(image: string): Promise<ImageInspectInfo> {
    const docker = this.#docker;
    try {
      return await docker.getImage(image).inspect();
    } catch (e: unknown) {
      if (statusOf(e) !== 404) throw e;
    }
    this.#log("pulling image", { image });
    const stream = await docker.pull(image);
    await new Promise<void>((resolve, reject) => {
      docker.modem.followProgress(
        stream,
        (error: Error | null, events: PullProgressEvent[]) => {
          const failed = events?.find((event) => event.error);
          if (error || failed) reject(error ?? new Error(`pull of ${image} failed: ${failed?.error}`));
          else resolve();
        },
        (event: PullProgressEvent) => this.#onPullProgress(image, event),
      );
    });
    this.#log("pulled image", { image });
    return await docker.getImage(image).inspect();
  }
}

/** Logs pull progress only when an event's status changes (the engine sends many progress ticks). */
function pullLogger(
  log: (msg: string, data?: object) => void,
): (image: string, event: PullProgressEvent) => void {
  const last = new Map<string, string>();
  return (image, event) => {
    const key = `${image}/${event.id ?? ""}`;
    if (event.status === undefined || last.get(key) === event.status) return;
    last.set(key, event.status);
    log("image pull progress", { image, id: event.id, status: event.status });
  };
}

/**
 * Sandboxes as the API shows them (SandboxInfo): the status, and while RUNNING the session key and the exposed
 * URLs, the agent's named as docs/agent-proxy.md says. A part of the sandbox service's RPC face.
 */
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { sandboxIdOfSessionKey } from "../../core/ids.ts";
import {
  type ExposedUrl,
  SandboxStatus as PbStatus,
  type SandboxInfo,
} from "../../gen/workspace/v1/sandbox_pb.js";
import type { SandboxRecord, SandboxStatus } from "../../ports/sandbox-repository.ts";
import type { RuntimeHandle } from "../../ports/sandbox-runtime.ts";
import type { SessionKeys } from "./ports.ts";
import type { LiveSandbox } from "./sandbox-state.ts";

/**
 * How sandbox JSON names the agent (docs/agent-proxy.md). `proxied`: a sandbox whose session key names it is
 * reached through this service's own origin, so its AGENT_SERVER URL is `publicUrl` (or `/`, the origin the client
 * used) and its direct loopback URL is AGENT_SERVER_DIRECT; false: the direct URL only. The proxied entry's port is
 * the one its URL reaches: `publicUrl`'s (explicit, else 443 or 80), else `servicePort()`, this service's listening
 * port (0 while it has none).
 */
export interface AgentUrls {
  proxied: boolean;
  publicUrl?: string | undefined;
  servicePort?: (() => number | undefined) | undefined;
}

const PB_STATUS: Record<SandboxStatus, PbStatus> = {
  STARTING: PbStatus.STARTING,
  RUNNING: PbStatus.RUNNING,
  PAUSED: PbStatus.PAUSED,
  ERROR: PbStatus.ERROR,
  MISSING: PbStatus.MISSING,
};

export interface SandboxInfosOptions {
  keys: Pick<SessionKeys, "open">;
  agentUrls: AgentUrls;
}

/** Sandboxes as the API shows them. */
export class SandboxInfos {
  readonly #o: SandboxInfosOptions;

  constructor(options: SandboxInfosOptions) {
    this.#o = options;
  }

  toInfo(l: LiveSandbox): SandboxInfo {
    const running = l.status === "RUNNING" && l.handle !== null;
    return {
      $typeName: "workspace.v1.SandboxInfo",
      id: l.record.id,
      createdByUserId: l.record.ownerId,
      sandboxSpecId: l.record.specId,
      status: PB_STATUS[l.status],
      ...(running ? { sessionApiKey: this.#o.keys.open(l.record) } : {}),
      exposedUrls: running && l.handle ? this.#exposedUrls(l.record, l.handle) : [],
      createdAt: timestampFromDate(l.record.createdAt),
    };
  }

  /**
   * The agent's URL, then the other published ports as the reference names them; VS Code's URL carries the
   * session key and the folder to open (`/?tkn=…&folder=…`), as the reference's.
   */
  #exposedUrls(record: SandboxRecord, handle: RuntimeHandle): ExposedUrl[] {
    const origin = new URL(handle.agentUrl).origin.replace(/:\d+$/, "");
    const direct = {
      $typeName: "workspace.v1.ExposedUrl",
      name: "AGENT_SERVER",
      url: handle.agentUrl,
      port: handle.port,
    } as const;
    const urls: ExposedUrl[] = [direct];
    const proxy = this.#o.agentUrls;
    if (proxy.proxied && sandboxIdOfSessionKey(this.#o.keys.open(record)) === record.id)
      urls.splice(
        0,
        1,
        { ...direct, url: proxy.publicUrl ?? "/", port: proxiedPort(proxy) },
        { ...direct, name: "AGENT_SERVER_DIRECT" },
      );
    for (const { name, port } of handle.exposedPorts ?? []) {
      let url = `${origin}:${port}`;
      if (name === "VSCODE") url += `/?tkn=${this.#o.keys.open(record)}&folder=${handle.workingDir ?? ""}`;
      urls.push({ $typeName: "workspace.v1.ExposedUrl", name, url, port });
    }
    return urls;
  }
}

/** The port the proxied AGENT_SERVER URL reaches (see AgentUrls). */
function proxiedPort(urls: AgentUrls): number {
  if (urls.publicUrl !== undefined) {
    const u = new URL(urls.publicUrl);
    return u.port !== "" ? Number(u.port) : u.protocol === "https:" ? 443 : 80;
  }
  return urls.servicePort?.() ?? 0;
}

/** A small REST client for the CLI: JSON in and out, errors carrying the server's message. */
export class ApiError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

export class ConnectionError extends Error {}

/** The message a person should see for an error body of either dialect (or a 422 list). */
export function errorMessage(status: number, body: unknown): string {
  if (typeof body === "object" && body !== null) {
    const b = body as { detail?: unknown; error?: unknown; message?: unknown };
    if (Array.isArray(b.detail)) {
      return b.detail
        .map(
          (d: { loc?: unknown[]; msg?: string }) =>
            `${(d.loc ?? []).filter((p) => p !== "body" && p !== "query").join(".")}: ${d.msg ?? ""}`,
        )
        .join("\n");
    }
    for (const v of [b.error, b.message, b.detail]) if (typeof v === "string") return v;
  }
  return `HTTP ${status}`;
}

export function createApiClient(baseUrl: string, key: string | undefined) {
  return async function request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = {};
    if (key !== undefined) headers["x-session-api-key"] = key;
    if (body !== undefined) headers["content-type"] = "application/json";
    let res: Response;
    try {
      res = await fetch(new URL(path, baseUrl), {
        method,
        headers,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(30_000),
      });
    } catch (err) {
      throw new ConnectionError(
        `cannot reach the server at ${baseUrl}: ${(err as Error).message} (is it running? set --url or WORKSPACE_URL)`,
      );
    }
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON
    }
    if (!res.ok) throw new ApiError(res.status, errorMessage(res.status, parsed));
    return parsed as T;
  };
}

/** A plain text table: header row, then rows; columns padded to their widest cell. */
export function table(head: string[], rows: string[][]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  return [head, ...rows]
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i] ?? 0))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

/** `key=value` → a settings field: JSON literals (numbers, true/false, null, objects) parse, anything else is a string. */
export function parseAssignment(arg: string): [string, unknown] {
  const eq = arg.indexOf("=");
  if (eq <= 0) throw new Error(`expected key=value, got ${JSON.stringify(arg)}`);
  const k = arg.slice(0, eq);
  const raw = arg.slice(eq + 1);
  try {
    return [k, JSON.parse(raw)];
  } catch {
    return [k, raw];
  }
}

/**
 * Reading a request's body: whole, up to a limit (413 beyond it), and as the JSON object a route expects (422 in
 * FastAPI/pydantic's shape for an empty body, bad JSON or another JSON value).
 */
import type { IncomingMessage } from "node:http";
import type { Json } from "./json.ts";
import { tooLarge, unprocessable } from "./replies.ts";

/** Reads the whole body; null as soon as it exceeds the limit. */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer | null> {
  return new Promise((resolvePromise, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    req.on("data", (chunk: Buffer) => {
      if (done) return;
      size += chunk.length;
      if (size > limit) {
        done = true;
        resolvePromise(null);
      } else {
        chunks.push(chunk);
      }
    });
    req.on("end", () => {
      if (!done) resolvePromise(Buffer.concat(chunks));
      done = true;
    });
    req.on("error", (e) => {
      if (!done) reject(e);
      done = true;
    });
  });
}

/** The body as a JSON object; throws a RequestError (413, 422) for anything else. */
export async function readJsonObject(req: IncomingMessage, maxBodyBytes: number): Promise<Json> {
  const declared = Number(req.headers["content-length"] ?? 0);
  if (declared > maxBodyBytes) throw tooLarge(maxBodyBytes);
  const raw = await readBody(req, maxBodyBytes);
  if (raw === null) throw tooLarge(maxBodyBytes);
  if (raw.length === 0)
    throw unprocessable([{ type: "missing", loc: ["body"], msg: "Field required", input: null }]);
  let body: unknown;
  try {
    body = JSON.parse(raw.toString("utf8"));
  } catch (e: unknown) {
    const error = e instanceof Error ? e.message : String(e);
    throw unprocessable([
      { type: "json_invalid", loc: ["body", 0], msg: "JSON decode error", input: {}, ctx: { error } },
    ]);
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw unprocessable([
      {
        type: "model_attributes_type",
        loc: ["body"],
        msg: "Input should be a valid dictionary or object to extract fields from",
        input: body,
      },
    ]);
  }
  return body as Json;
}

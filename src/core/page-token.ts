import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * Keyset cursor for newest-first listings: the (createdAt, id) of the last item of the previous page.
 * Listings are ordered by createdAt descending, then id descending, so paging is stable under inserts.
 */
export interface Cursor {
  createdAt: Date;
  id: string;
}

/**
 * Opaque, signed page ids. A page id encodes the keyset cursor and the listing it belongs to; a page id the
 * server did not issue (or issued for another listing) fails to decode.
 */
export class PageTokens {
  readonly #key: Buffer;

  constructor(key: Buffer) {
    this.#key = key;
  }

  encode(cursor: Cursor, scope: string): string {
    const body = Buffer.from(JSON.stringify([cursor.createdAt.getTime(), cursor.id])).toString("base64url");
    return `${body}.${this.#sign(body, scope)}`;
  }

  /** null when the token is malformed, forged, or from another scope. */
  decode(token: string, scope: string): Cursor | null {
    const dot = token.indexOf(".");
    if (dot <= 0 || token.length > 512) return null;
    const body = token.slice(0, dot);
    const mac = Buffer.from(token.slice(dot + 1), "base64url");
    const expected = Buffer.from(this.#sign(body, scope), "base64url");
    if (mac.length !== expected.length || !timingSafeEqual(mac, expected)) return null;
    try {
      const parsed: unknown = JSON.parse(Buffer.from(body, "base64url").toString("utf8"));
      if (!Array.isArray(parsed) || typeof parsed[0] !== "number" || typeof parsed[1] !== "string")
        return null;
      return { createdAt: new Date(parsed[0]), id: parsed[1] };
    } catch {
      return null;
    }
  }

  #sign(body: string, scope: string): string {
    return createHmac("sha256", this.#key)
      .update(scope)
      .update("\0")
      .update(body)
      .digest("base64url")
      .slice(0, 22);
  }
}

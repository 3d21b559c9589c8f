import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";

const VERSION = "v1";

/**
 * Authenticated encryption (AES-256-GCM) of secret values at rest. Sealed values look like
 * `v1.<iv>.<tag>.<ciphertext>` (base64url) and are bound to `context` (e.g. the user id) as additional data,
 * so a value copied to another user's document does not decrypt.
 */
export class SecretBox {
  readonly #key: Buffer;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new Error("encryption key must be 32 bytes");
    this.#key = key;
  }

  seal(plaintext: string, context: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.#key, iv);
    cipher.setAAD(Buffer.from(context, "utf8"));
    const ct = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
    return `${VERSION}.${iv.toString("base64url")}.${cipher.getAuthTag().toString("base64url")}.${ct.toString("base64url")}`;
  }

  /** Throws when the value was tampered with, sealed under another key or for another context. */
  open(sealed: string, context: string): string {
    const [version, iv, tag, ct] = sealed.split(".");
    if (version !== VERSION || iv === undefined || tag === undefined || ct === undefined) {
      throw new Error("not a sealed value");
    }
    const decipher = createDecipheriv("aes-256-gcm", this.#key, Buffer.from(iv, "base64url"));
    decipher.setAAD(Buffer.from(context, "utf8"));
    decipher.setAuthTag(Buffer.from(tag, "base64url"));
    return Buffer.concat([decipher.update(Buffer.from(ct, "base64url")), decipher.final()]).toString("utf8");
  }

  /** A key derived for another purpose (e.g. signing page tokens), so one configured key serves all. */
  derive(purpose: string): Buffer {
    return createHash("sha256").update(this.#key).update(`\0${purpose}`).digest();
  }
}

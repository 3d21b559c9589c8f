/**
 * Masking a conversation's secrets (its custom secrets and the model key) in what the agent shows: every string of
 * an event, before it is kept, saved, sent to the service's webhook or to a websocket. A secret is found as it is
 * and in the encodings a command or a file shows it in: JSON-escaped, URL-encoded (percent and form encoding),
 * base64 (standard and URL-safe, at any byte offset in a longer encoded text, as `printf %s "$S" | base64` or a
 * `.netrc`-style file gives it) and hex. Values shorter than {@link MIN_SECRET_LENGTH} are not masked (they would
 * mask ordinary text), nor are encoded forms shorter than {@link MIN_ENCODED_LENGTH}. Base64 wrapped over lines is
 * searched with its line breaks taken out.
 */

export const SECRET_MASK = "<secret-hidden>";
export const MIN_SECRET_LENGTH = 3;
const MIN_ENCODED_LENGTH = 8;

/** Every form of `value` to mask, longest first. */
export function secretForms(value: string): string[] {
  if (value.length < MIN_SECRET_LENGTH) return [];
  const forms = new Set<string>([value]);
  const encoded = new Set<string>();
  encoded.add(JSON.stringify(value).slice(1, -1));
  const percent = encodeURIComponent(value);
  encoded.add(percent);
  encoded.add(percent.replace(/%[0-9A-F]{2}/g, (e) => e.toLowerCase()));
  encoded.add(percent.replaceAll("%20", "+"));
  const bytes = Buffer.from(value, "utf8");
  encoded.add(bytes.toString("hex"));
  encoded.add(bytes.toString("hex").toUpperCase());
  for (const core of base64Cores(bytes)) {
    encoded.add(core);
    encoded.add(core.replaceAll("+", "-").replaceAll("/", "_"));
  }
  for (const form of encoded) if (form.length >= MIN_ENCODED_LENGTH) forms.add(form);
  return [...forms].sort((a, b) => b.length - a.length);
}

/**
 * The base64 characters that encode only `bytes`, whatever comes before or after them, for each of the three byte
 * offsets the value can start at in a longer encoded text: the characters that also carry a neighbour's bits are
 * left out at both ends.
 */
function base64Cores(bytes: Buffer): string[] {
  const cores: string[] = [];
  for (let offset = 0; offset < 3; offset++) {
    const text = Buffer.concat([Buffer.alloc(offset), bytes])
      .toString("base64")
      .replace(/=+$/, "");
    // Leading characters that carry bits of the padding: none at offset 0, two at 1 (8 + 4 bits), three at 2.
    const skip = offset === 0 ? 0 : offset === 1 ? 2 : 3;
    // Trailing characters that carry bits of what follows: the last one unless the bytes end a 3-byte group.
    const end = (offset + bytes.length) % 3 === 0 ? text.length : text.length - 1;
    if (end > skip) cores.push(text.slice(skip, end));
  }
  return cores;
}

/** A function replacing every form of every value with {@link SECRET_MASK}; identity when there is none. */
export function secretMasker(values: Iterable<string>): (text: string) => string {
  const forms = [...new Set([...values].flatMap(secretForms))].sort((a, b) => b.length - a.length);
  if (forms.length === 0) return (text) => text;
  const maskFlat = (text: string): string => {
    let out = text;
    for (const form of forms) if (out.includes(form)) out = out.replaceAll(form, SECRET_MASK);
    return out;
  };
  return (text) => {
    const out = maskFlat(text);
    // Base64 wrapped over lines (`base64` breaks at 76 characters, PEM at 64): a block of such lines is searched
    // as one text, and shown joined, masked, when a secret was in it.
    if (!out.includes("\n")) return out;
    return out.replace(WRAPPED_BASE64, (block) => {
      const joined = block.replace(/\r?\n/g, "");
      const masked = maskFlat(joined);
      return masked === joined ? block : masked;
    });
  };
}

/** Two or more lines of base64 (standard or URL-safe), the last one possibly shorter and padded. */
const WRAPPED_BASE64 = /(?:[A-Za-z0-9+/_-]{16,}\r?\n)+[A-Za-z0-9+/_-]*={0,2}(?=\r?\n|$)/g;

/**
 * `value` with `mask` applied to every string in it (object keys kept); the same object when nothing changed,
 * else a copy of what changed.
 */
export function maskStrings<T>(value: T, mask: (text: string) => string): T {
  if (typeof value === "string") return mask(value) as T;
  if (Array.isArray(value)) {
    let changed = false;
    const out = value.map((item) => {
      const masked = maskStrings(item, mask);
      if (masked !== item) changed = true;
      return masked;
    });
    return (changed ? out : value) as T;
  }
  if (value === null || typeof value !== "object") return value;
  let out: Record<string, unknown> | null = null;
  for (const [key, inner] of Object.entries(value)) {
    const masked = maskStrings(inner, mask);
    if (masked === inner) continue;
    out ??= { ...(value as Record<string, unknown>) };
    out[key] = masked;
  }
  return (out ?? value) as T;
}

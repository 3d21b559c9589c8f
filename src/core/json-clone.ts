/**
 * A deep copy of a JSON value (objects, arrays, strings, numbers, booleans, null), as JSON.parse would build it:
 * plain objects and arrays, own enumerable keys only, a `__proto__` key copied as data. Several times faster than
 * structuredClone for the documents kept here (no serialization round trip), which matters on every
 * read-modify-write. Not for values holding anything but JSON (dates, maps, class instances, cycles).
 */
export function cloneJson<T>(value: T): T {
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) {
    const out: unknown[] = new Array(value.length);
    for (let i = 0; i < value.length; i++) out[i] = cloneJson(value[i]);
    return out as T;
  }
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value)) {
    const v = cloneJson((value as Record<string, unknown>)[key]);
    if (key === "__proto__")
      Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true });
    else out[key] = v;
  }
  return out as T;
}

/**
 * The JSON of register payloads, written as the Python SDK writes them. JavaScript has one
 * number type, so `3.0` and `3` are the same value here; a parameter the catalogue types as
 * a float (`q`, `sigma`, `target_fpr`) is held as an `F64` and written with its fraction
 * (`3.0`), as Python writes a float, so both SDKs send the same bytes for the same pipeline.
 */

/** A float value of a payload: written `3.0`, never `3` (its `toJSON` is the plain number). */
export class F64 {
  constructor(readonly value: number) {}

  toJSON(): number {
    return this.value;
  }
}

export type Json = null | boolean | number | string | F64 | Json[] | { [key: string]: Json };

/**
 * A float as Python's `repr` writes it: the shortest digits that round-trip (as JavaScript),
 * positional with at least one fractional digit for exponents -4..15, else `1e-05` / `1e+16`.
 */
export function floatText(x: number): string {
  if (!Number.isFinite(x)) return "null";
  if (Object.is(x, -0)) return "-0.0";
  const [mantissa, expText] = x.toExponential().split("e") as [string, string];
  const exp = Number(expText);
  if (exp < -4 || exp >= 16) return `${mantissa}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
  const text = String(x);
  return text.includes(".") ? text : `${text}.0`;
}

/**
 * `value` as JSON text: like `JSON.stringify` (no spaces), except that an `F64` and every
 * non-integral number are written by `floatText`. `sortKeys` sorts the keys of every object.
 */
export function jsonText(value: unknown, options: { sortKeys?: boolean } = {}): string {
  const sortKeys = options.sortKeys ?? false;
  const write = (v: unknown): string | undefined => {
    if (v instanceof F64) return floatText(v.value);
    if (v === null) return "null";
    switch (typeof v) {
      case "number": return Number.isInteger(v) || !Number.isFinite(v) ? JSON.stringify(v) : floatText(v);
      case "string":
      case "boolean": return JSON.stringify(v);
      case "object": break;
      default: return undefined; // undefined, functions, symbols: left out, as JSON.stringify does
    }
    if (Array.isArray(v)) return `[${v.map((x) => write(x) ?? "null").join(",")}]`;
    const obj = v as Record<string, unknown> & { toJSON?: () => unknown };
    if (typeof obj.toJSON === "function") return write(obj.toJSON());
    let entries = Object.entries(obj);
    if (sortKeys) entries = entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    const parts: string[] = [];
    for (const [k, x] of entries) {
      const text = write(x);
      if (text !== undefined) parts.push(`${JSON.stringify(k)}:${text}`);
    }
    return `{${parts.join(",")}}`;
  };
  return write(value) ?? "null";
}

/** A deep copy of payload JSON (arrays and objects copied; `F64` values are immutable and shared). */
export function cloneJson<T>(value: T): T {
  if (Array.isArray(value)) return value.map(cloneJson) as T;
  if (value !== null && typeof value === "object" && !(value instanceof F64)) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, cloneJson(v)])) as T;
  }
  return value;
}

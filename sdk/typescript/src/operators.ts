/**
 * Operator functions: `count`, `sum`, ... (the Python SDK's `bv.count`, `bv.sum`, ...), with
 * the same names, parameters, defaults and validation messages. Each function's parameters,
 * their defaults and every range come from the catalogue (`catalogue.json`): the generic
 * `feature()` below validates in the order of spec/sdk.md §6.1, like `_agg` in
 * beava/dsl/operators.py. The signatures here add only the static types (a feature's value
 * type, so that rows read back are typed).
 */
import { CATALOGUE, contains, lookup, type Bounds, type OperatorSpec, type ParamSpec } from "./catalogue.js";
import { RegistrationError, ValueError } from "./errors.js";
import { F64, type Json } from "./json.js";
import { Expr } from "./expressions.js";

/** A scalar a field may hold. */
export type Scalar = string | number | boolean;

/** One feature definition; `T` is the type of its value in a row read back. */
export class Feature<T = unknown> {
  /** @internal */
  declare readonly __value?: T;

  /** @internal */
  constructor(
    /** The canonical wire op. */
    readonly op: string,
    /** `params` as sent: field, window, half_life, where, then the op's own params. */
    readonly params: Readonly<Record<string, Json>>,
    /** The columns `where` reads (checked against the aggregated events). */
    readonly whereColumns: readonly string[],
  ) {}
}

export type ValueOf<F> = F extends Feature<infer T> ? T : never;

const FOREVER = CATALOGUE.durations.forever;
const SDK_DURATION = new RegExp(CATALOGUE.durations.sdk_pattern);
const MAX_DURATION_MS = BigInt(CATALOGUE.durations.max_ms);

/** Milliseconds of a server duration (`5m`), as a bigint (durations reach 2^63-1 ms). */
export function durationMs(text: string): bigint {
  const m = /^([0-9]+)(ms|s|m|h|d)$/.exec(text);
  if (m === null) throw new ValueError(`invalid duration '${text}'; expected <digits>(ms|s|m|h|d) or 'forever'`);
  const ms = BigInt(m[1] as string) * BigInt(CATALOGUE.durations.units_ms[m[2] as string] as number);
  if (ms === 0n || ms > MAX_DURATION_MS) {
    throw new ValueError(`invalid duration '${text}'; must be > 0 and at most 2^63-1 ms`);
  }
  return ms;
}

/** A duration argument (spec/sdk.md §2.2), returned unchanged; undefined when absent. */
export function checkDuration(
  value: unknown, name: string, allowForever: boolean, required = false,
): string | undefined {
  if (value === undefined || value === null) {
    if (required) throw new ValueError(`${name} is required`);
    return undefined;
  }
  if (typeof value !== "string") throw new TypeError(`${name} must be a duration string, got ${typeof value}`);
  if (value === FOREVER) {
    if (allowForever) return value;
    throw new ValueError(`${name}='${value}' is not allowed; give a finite duration`);
  }
  if (!SDK_DURATION.test(value)) {
    const allowed = "<n>(ms|s|m|h|d)" + (allowForever ? " or 'forever'" : "");
    throw new ValueError(`invalid ${name} '${value}'; expected ${allowed} with n >= 1`);
  }
  durationMs(value);
  return value;
}

function shown(value: unknown): string {
  return typeof value === "string" ? `'${value}'` : JSON.stringify(value) ?? String(value);
}

function schemaMismatch(op: string, what: string, value: unknown): never {
  throw new RegistrationError({
    code: "schema_mismatch",
    path: op,
    message:
      `bv.${op}() ${what} must be a column name str, got ${shown(value)}; to aggregate a ` +
      "computed value, derive a column first with .with_columns(name=<expr>) and pass that column's name",
  });
}

function checkRange(op: string, name: string, value: number, bounds: (Bounds | null | undefined)[]): void {
  for (const b of bounds) {
    if (b && !contains(b, value)) throw new ValueError(`bv.${op}(): ${name}=${value} is out of range ${b.text}`);
  }
}

function checkItems(op: string, param: ParamSpec, items: unknown[]): void {
  if (param.max_items !== null && items.length > param.max_items) {
    throw new ValueError(`bv.${op}(): ${param.name} has ${items.length} entries; at most ${param.max_items}`);
  }
}

function isNumber(value: unknown): value is number {
  return typeof value === "number";
}

function buckets(op: string, name: string, value: unknown): number[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw new ValueError(`bv.${op}(): ${name} must be a non-empty list of numbers`);
  }
  const out: number[] = [];
  for (const v of value) {
    if (!isNumber(v) || Number.isNaN(v)) {
      throw new ValueError(`bv.${op}(): ${name} entries must be numbers (not NaN), got ${shown(v)}`);
    }
    if (out.length && !(v > (out[out.length - 1] as number))) {
      throw new ValueError(`bv.${op}(): ${name} must be strictly increasing, got ${shown(value)}`);
    }
    out.push(v);
  }
  return out;
}

/** One op-specific parameter, validated by its catalogue kind; returns the wire value. */
function param(op: string, spec: OperatorSpec, name: string, value: unknown): Json {
  const p = spec.params.find((q) => q.name === name);
  if (p === undefined) throw new Error(`'${name}' is not a parameter of '${op}' in the operator catalogue`);
  const bounds = [p.bounds, CATALOGUE.client_bounds[`${spec.name}.${name}`]];
  switch (p.kind) {
    case "uint":
      if (!isNumber(value) || !Number.isInteger(value)) {
        throw new TypeError(`bv.${op}(): ${name} must be an int, got ${shown(value)}`);
      }
      checkRange(op, name, value, bounds);
      return value;
    case "number":
      if (!isNumber(value)) throw new TypeError(`bv.${op}(): ${name} must be a number, got ${shown(value)}`);
      if (!Number.isFinite(value)) throw new ValueError(`bv.${op}(): ${name} must be finite, got ${value}`);
      checkRange(op, name, value, bounds);
      return new F64(value);
    case "numbers": {
      const list = buckets(op, name, value);
      checkItems(op, p, list);
      return list;
    }
    case "strings":
      if (!Array.isArray(value) || !value.every((v) => typeof v === "string")) {
        throw new ValueError(`bv.${op}(): ${name} must be None or a list of str, got ${shown(value)}`);
      }
      checkItems(op, p, value);
      return [...(value as string[])];
    case "duration":
      return checkDuration(value, name, false, p.required) as string;
    default:
      if (typeof value !== "string" || !value) schemaMismatch(op, name.replace(/_field$/, ""), value);
      return value;
  }
}

/** `(m, k)` of a bloom_member filter, the catalogue's arithmetic (operators.md §11.4). */
function bloomProblem(expectedN: number, targetFpr: number): string | undefined {
  const n = Math.max(expectedN, 1);
  const mF = (-n * Math.log(targetFpr)) / Math.log(2) ** 2;
  const m = Math.floor((Math.ceil(mF) + 63) / 64) * 64;
  const k = Math.max(1, Math.ceil((mF / n) * Math.log(2)));
  const { max_hashes: maxHashes, max_bits: maxBits } = CATALOGUE.bloom;
  if (k > maxHashes) {
    return `bloom_member target_fpr ${targetFpr} needs ${k} hashes per value; at most ${maxHashes} ` +
      `(target_fpr >= 2^-${maxHashes}, about ${(2 ** -maxHashes).toPrecision(3)})`;
  }
  if (m > maxBits) {
    return `bloom_member expected_n ${expectedN} with target_fpr ${targetFpr} needs a filter of ${m} ` +
      `bits per entity; at most ${maxBits} (lower expected_n or raise target_fpr)`;
  }
  return undefined;
}

function warnWindowIgnored(op: string, window: string): void {
  process.emitWarning(
    `bv.${op}() aggregates over the entity's whole lifetime; window='${window}' is sent to the server and ignored there`,
    "WindowIgnoredWarning",
  );
}

// Function parameters that name columns of the geo operators (`lat` -> `lat_field`).
const COLUMN_PARAMS: Readonly<Record<string, string>> = { lat: "lat_field", lon: "lon_field" };

/**
 * Validate the arguments of operator function `fn` (the name the user called) and build
 * the feature: field, the op's own params, window, half_life, baseline_window, where.
 */
export function feature<T>(fn: string, args: Readonly<Record<string, unknown>>): Feature<T> {
  const signature = CATALOGUE.functions[fn];
  const spec = signature === undefined ? undefined : lookup(signature.op);
  if (signature === undefined || spec === undefined) throw new Error(`'${fn}' is not an operator function`);
  for (const name of Object.keys(args)) {
    if (args[name] !== undefined && !signature.params.some((p) => p.name === name)) {
      throw new TypeError(`bv.${fn}() got an unexpected argument '${name}'`);
    }
  }
  const given = (name: string): unknown => {
    const p = signature.params.find((q) => q.name === name);
    const value = args[name];
    if (value !== undefined && value !== null) return value;
    if (p?.required && name !== "window") throw new TypeError(`bv.${fn}() missing required argument '${name}'`);
    return p?.default ?? undefined;
  };
  const out: Record<string, Json> = {};
  const extras: Record<string, Json> = {};
  const has = (name: string): boolean => signature.params.some((p) => p.name === name);
  if (has("field")) {
    const field = args["field"];
    if (typeof field !== "string" || !field) schemaMismatch(fn, "field", field);
    out["field"] = field;
  }
  for (const p of signature.params) {
    if (["field", "window", "half_life", "baseline_window", "where"].includes(p.name)) continue;
    const value = given(p.name);
    if (value === undefined) continue;
    const wireName = COLUMN_PARAMS[p.name] ?? p.name;
    extras[wireName] = param(fn, spec, wireName, value);
  }
  if (has("window")) {
    const required = signature.params.find((p) => p.name === "window")?.required ?? false;
    const window = checkDuration(args["window"], "window", spec.window !== "required", required);
    if (window !== undefined) {
      if (spec.window === "ignored") warnWindowIgnored(fn, window);
      out["window"] = window;
    }
  }
  if (has("half_life")) out["half_life"] = checkDuration(args["half_life"], "half_life", false, true) as string;
  if (has("baseline_window")) {
    // z_score's baseline: not a catalogue param (the server ignores it), window grammar
    extras["baseline_window"] = checkDuration(args["baseline_window"], "baseline_window", true, true) as string;
  }
  const where = args["where"];
  let whereColumns: string[] = [];
  if (where !== undefined && where !== null) {
    if (!(where instanceof Expr)) {
      throw new TypeError(`bv.${fn}(): where must be an expression (bv.col(...) ...), got ${typeof where}`);
    }
    out["where"] = where.toExprString();
    whereColumns = where.columns();
  }
  if (spec.name === "bloom_member") {
    const problem = bloomProblem(
      (extras["expected_n"] as number | undefined) ?? CATALOGUE.bloom.default_expected_n,
      (extras["target_fpr"] as F64 | undefined)?.value ?? CATALOGUE.bloom.default_target_fpr,
    );
    if (problem !== undefined) throw new ValueError(`bv.bloom_member(): ${problem}`);
  }
  return new Feature<T>(spec.name, { ...out, ...extras }, whereColumns);
}

// -- options ---------------------------------------------------------------------------------

export interface Where { where?: Expr }
export interface Windowed extends Where { window?: string }
export interface WindowRequired extends Where { window: string }
export interface HalfLife extends Where { half_life: string }
export interface Geo extends Where { lat: string; lon: string }

type Num = number | null;
type List = Scalar[];

// -- A: core scalar --------------------------------------------------------------------------

/** Number of events that match `where` (all events without it). Empty: `0`. */
export const count = (o: Windowed = {}): Feature<number> => feature("count", { ...o });
/** Sum of the numeric values of `field`. Empty: `null`. */
export const sum = (field: string, o: Windowed = {}): Feature<Num> => feature("sum", { field, ...o });
/** Arithmetic mean of the numeric values of `field`. Empty: `null`. */
export const mean = (field: string, o: Windowed = {}): Feature<Num> => feature("mean", { field, ...o });
/** Smallest value of `field`, read back with its own type. Empty: `null`. */
export const min = (field: string, o: Windowed = {}): Feature<Scalar | null> => feature("min", { field, ...o });
/** Largest value of `field`, read back with its own type. Empty: `null`. */
export const max = (field: string, o: Windowed = {}): Feature<Scalar | null> => feature("max", { field, ...o });
/** Sample variance of `field`; `null` below two values. */
export const var_ = (field: string, o: Windowed = {}): Feature<Num> => feature("var", { field, ...o });
/** Sample standard deviation of `field`; `null` below two values. */
export const std = (field: string, o: Windowed = {}): Feature<Num> => feature("std", { field, ...o });
/** Fraction of the events reaching the feature that match `where`. Empty: `null`. */
export const ratio = (o: Windowed = {}): Feature<Num> => feature("ratio", { ...o });

// -- B: sketches -----------------------------------------------------------------------------

/** Number of distinct values of `field`. Empty: `0`. */
export const n_unique = (field: string, o: Windowed = {}): Feature<number> => feature("n_unique", { field, ...o });
/** The `q`-quantile of the numeric values of `field` (`0 < q < 1`). Empty: `null`. */
export const quantile = (field: string, o: Windowed & { q: number }): Feature<Num> =>
  feature("quantile", { field, ...o });
/** The `k` most frequent values of `field`, as `[{count, value}]`. Empty: `[]`. */
export const top_k = (field: string, o: Windowed & { k: number }): Feature<{ count: number; value: Scalar }[]> =>
  feature("top_k", { field, ...o });
/** Whether the latest value of `field` had (probably) been seen before (Bloom filter). */
export const bloom_member = (field: string, o: Where & { expected_n?: number; target_fpr?: number } = {}):
  Feature<boolean> => feature("bloom_member", { field, ...o });
/** Shannon entropy (bits) of the values of `field`. Empty: `0.0`. */
export const entropy = (field: string, o: Windowed = {}): Feature<number> => feature("entropy", { field, ...o });

// -- C: point / ordinal ----------------------------------------------------------------------

/** The first value of `field`. Empty: `null`. */
export const first = (field: string, o: Where = {}): Feature<Scalar | null> => feature("first", { field, ...o });
/** The latest value of `field`. Empty: `null`. */
export const last = (field: string, o: Where = {}): Feature<Scalar | null> => feature("last", { field, ...o });
/** The first `n` values of `field` in arrival order. Empty: `[]`. */
export const first_n = (field: string, o: Where & { n: number }): Feature<List> => feature("first_n", { field, ...o });
/** The latest `n` values of `field`, oldest first. Empty: `[]`. */
export const last_n = (field: string, o: Where & { n: number }): Feature<List> => feature("last_n", { field, ...o });
/** The value of `field` `n` qualifying events before the latest; `null` until there are `n + 1`. */
export const lag = (field: string, o: Where & { n: number }): Feature<Scalar | null> => feature("lag", { field, ...o });

// -- D: recency and streaks ------------------------------------------------------------------

/** Time (epoch ms) of the first matching event. Empty: `null`. */
export const first_seen = (o: Where = {}): Feature<Num> => feature("first_seen", { ...o });
/** Time (epoch ms) of the latest matching event. Empty: `null`. */
export const last_seen = (o: Where = {}): Feature<Num> => feature("last_seen", { ...o });
/** Milliseconds from the first matching event to the read. Empty: `null`. */
export const age = (o: Where = {}): Feature<Num> => feature("age", { ...o });
/** Whether any matching event was seen. Empty: `false`. */
export const has_seen = (o: Where = {}): Feature<boolean> => feature("has_seen", { ...o });
/** Milliseconds from the latest matching event to the read. Empty: `null`. */
export const time_since = (o: Where = {}): Feature<Num> => feature("time_since", { ...o });
/** Milliseconds from the `n`-th latest matching event to the read; `null` until `n` events. */
export const time_since_last_n = (o: Where & { n: number }): Feature<Num> => feature("time_since_last_n", { ...o });
/** Current run of consecutive matching events. Empty: `0`. */
export const streak = (o: Where = {}): Feature<number> => feature("streak", { ...o });
/** Longest run of consecutive matching events so far. Empty: `0`. */
export const max_streak = (o: Where = {}): Feature<number> => feature("max_streak", { ...o });
/** Current run of consecutive non-matching events. Empty: `0`. */
export const negative_streak = (o: Where = {}): Feature<number> => feature("negative_streak", { ...o });
/** Whether the latest matching event falls within the last `window` (finite). Empty: `false`. */
export const first_seen_in_window = (o: WindowRequired): Feature<boolean> => feature("first_seen_in_window", { ...o });

// -- E: decay --------------------------------------------------------------------------------

/** Exponentially weighted moving average of `field`. Empty: `null`. */
export const ewma = (field: string, o: HalfLife): Feature<Num> => feature("ewma", { field, ...o });
/** Alias of `ewma` (the wire carries `ewma`). */
export const ema = (field: string, o: HalfLife): Feature<Num> => feature("ema", { field, ...o });
/** Exponentially weighted variance of `field`. Empty: `null`. */
export const ewvar = (field: string, o: HalfLife): Feature<Num> => feature("ewvar", { field, ...o });
/** z-score of the latest value against the exponentially weighted mean and variance. */
export const ew_zscore = (field: string, o: HalfLife): Feature<Num> => feature("ew_zscore", { field, ...o });
/** Sum of `field`, each value decaying by half every `half_life`. Empty: `null`. */
export const decayed_sum = (field: string, o: HalfLife): Feature<Num> => feature("decayed_sum", { field, ...o });
/** Event count, each event decaying by half every `half_life`. Empty: `null`. */
export const decayed_count = (o: HalfLife): Feature<Num> => feature("decayed_count", { ...o });
/** Time-weighted average of `field` (`window` required, sent, ignored by the server). */
export const twa = (field: string, o: WindowRequired): Feature<Num> => feature("twa", { field, ...o });

// -- F: velocity and anomaly -----------------------------------------------------------------

/** Change of `field` per millisecond between the two latest events apart in time. */
export const rate_of_change = (field: string, o: WindowRequired): Feature<Num> =>
  feature("rate_of_change", { field, ...o });
/** Mean gap in milliseconds between consecutive matching events; `null` until two events. */
export const inter_arrival_stats = (o: WindowRequired): Feature<Num> => feature("inter_arrival_stats", { ...o });
/** The most matching events ever seen inside one `sub_window`. Empty: `0`. */
export const burst_count = (o: WindowRequired & { sub_window: string }): Feature<number> =>
  feature("burst_count", { ...o });
/** Latest value of `field` minus the previous one; `null` until two values. */
export const delta_from_prev = (field: string, o: Where = {}): Feature<Num> => feature("delta_from_prev", { field, ...o });
/** Least-squares slope of `field` per millisecond over the entity's lifetime. */
export const trend = (field: string, o: WindowRequired): Feature<Num> => feature("trend", { field, ...o });
/** Residual of the latest value of `field` against the lifetime trend line. */
export const trend_residual = (field: string, o: WindowRequired): Feature<Num> =>
  feature("trend_residual", { field, ...o });
/** Number of values more than `sigma` standard deviations from the mean before them. */
export const outlier_count = (field: string, o: WindowRequired & { sigma?: number }): Feature<number> =>
  feature("outlier_count", { field, ...o });
/** Number of times the value of `field` differed from the previous one. Empty: `0`. */
export const value_change_count = (field: string, o: WindowRequired): Feature<number> =>
  feature("value_change_count", { field, ...o });
/** z-score of the latest value of `field` against all its values (`baseline_window` is sent, not used). */
export const z_score = (field: string, o: Where & { baseline_window: string }): Feature<Num> =>
  feature("z_score", { field, ...o });

// -- G: buffers and distributions ------------------------------------------------------------

/** Counts of the values of `field` per bucket between the `buckets` edges. */
export const histogram = (field: string, o: Where & { buckets: number[] }): Feature<Record<string, number>> =>
  feature("histogram", { field, ...o });
/** Event counts per UTC hour of the day: 24 integers. */
export const hour_of_day_histogram = (o: Where = {}): Feature<number[]> => feature("hour_of_day_histogram", { ...o });
/** Event counts per UTC day of week and hour: 168 keys `"Mon-00"` ... `"Sun-23"`. */
export const dow_hour_histogram = (o: Where = {}): Feature<Record<string, number>> =>
  feature("dow_hour_histogram", { ...o });
/** z-score of the latest value of `field` against the values of the same UTC hour. */
export const seasonal_deviation = (field: string, o: Where = {}): Feature<Num> =>
  feature("seasonal_deviation", { field, ...o });
/** Share of each value of `field` among the events (`{value: fraction}`). Empty: `{}`. */
export const event_type_mix = (field: string, o: Where & { categories?: string[]; max_categories?: number } = {}):
  Feature<Record<string, number>> => feature("event_type_mix", { field, ...o });
/** The `n` latest values of `field`, oldest first. Empty: `[]`. */
export const most_recent_n = (field: string, o: Where & { n: number }): Feature<List> =>
  feature("most_recent_n", { field, ...o });
/** A uniform sample of `samples` values of `field`. Empty: `[]`. */
export const reservoir_sample = (field: string, o: Where & { samples: number }): Feature<List> =>
  feature("reservoir_sample", { field, ...o });

// -- H: geo ----------------------------------------------------------------------------------

/** Highest speed (km/h) seen between consecutive positions. */
export const geo_velocity = (o: Geo): Feature<Num> => feature("geo_velocity", { ...o });
/** Total distance (km) travelled between consecutive positions. Empty: `0.0`. */
export const geo_distance = (o: Geo): Feature<Num> => feature("geo_distance", { ...o });
/** Spread (km) of the positions seen; `null` below two positions. */
export const geo_spread = (o: Geo): Feature<Num> => feature("geo_spread", { ...o });
/** Distance (km) of the latest position from the mean of the last `samples` positions. */
export const distance_from_home = (o: Geo & { samples?: number }): Feature<Num> =>
  feature("distance_from_home", { ...o });

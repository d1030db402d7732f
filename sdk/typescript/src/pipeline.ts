/**
 * Events, chains and tables: the TypeScript form of `@bv.event` / `@bv.table` and the chain
 * methods (spec/sdk.md §2-§4), building the same wire steps and tracking the schema through
 * them as beava/dsl/chain.py does. Every method returns a new object.
 *
 *     const Txn = bv.event("Txn", { user_id: "str", amount: "f64" });
 *     const UserSpend = bv.table("UserSpend", { key: "user_id" },
 *       Txn.groupBy("user_id").agg({ spend_1h: bv.sum("amount", { window: "1h" }) }));
 */
import { CATALOGUE, lookup } from "./catalogue.js";
import { DescriptorError, ValueError } from "./errors.js";
import { cloneJson, type Json } from "./json.js";
import { castTarget, CAST_TARGETS, type CastTarget, Expr, type Operand, operand } from "./expressions.js";
import { checkDuration, durationMs, Feature, type ValueOf } from "./operators.js";

export type WireType = "str" | "i64" | "f64" | "bool";
/** A field that may be absent or null in a push. */
export interface Optional<T extends WireType = WireType> {
  readonly optional: T;
}
export type FieldSpec = WireType | Optional;
export type Columns = Record<string, WireType>;
export type Step = Record<string, Json>;

/** `optional("str")`: a field the push may leave out (the Python SDK's `str | None`). */
export function optional<T extends WireType>(type: T): Optional<T> {
  return { optional: type };
}

/** The TypeScript type of a value of a wire type. */
export type TsOf<T> = T extends "str" ? string : T extends "i64" | "f64" ? number : T extends "bool" ? boolean : unknown;
type BaseOf<F> = F extends Optional<infer T> ? T : F;
export type ColumnsOf<F extends Record<string, FieldSpec>> = { -readonly [K in keyof F]: BaseOf<F[K]> };
type OptionalKeys<F> = { [K in keyof F]: F[K] extends Optional ? K : never }[keyof F];
/** The fields a push of this event carries (optional fields may be left out). */
export type EventFields<F extends Record<string, FieldSpec>> =
  { [K in Exclude<keyof F, OptionalKeys<F>>]: TsOf<F[K]> } &
  { [K in OptionalKeys<F>]?: TsOf<BaseOf<F[K]>> | null };

const WIRE_TYPES = new Set(CATALOGUE.event.wire_types);
const MAX_DURATION_MS = BigInt(CATALOGUE.durations.max_ms);

function quoted(names: readonly string[]): string {
  const head = names.slice(0, 12).map((n) => `'${n}'`).join(", ");
  return (names.length > 12 ? `${head} and ${names.length - 12} more` : head) || "none";
}

function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0] as number;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const here = row[j] as number;
      row[j] = Math.min(here + 1, (row[j - 1] as number) + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = here;
    }
  }
  return row[b.length] as number;
}

/** `text` about the unknown `name`, then the names there are and the nearest of them. */
export function withKnownNames(text: string, name: string, names: readonly string[]): string {
  const close = names
    .map((n) => ({ n, score: 1 - distance(n.toLowerCase(), name.toLowerCase()) / Math.max(n.length, name.length, 1) }))
    .filter((c) => c.score >= 0.6)
    .sort((x, y) => y.score - x.score)
    .slice(0, 3)
    .map((c) => `'${c.n}'`);
  const out = `${text} (fields: ${quoted(names)})`;
  return close.length ? `${out}; did you mean ${close.join(" or ")}?` : out;
}

function fieldNames(op: string, fields: readonly unknown[]): string[] {
  if (!fields.length) throw new ValueError(`${op}() needs at least one column name`);
  for (const name of fields) {
    if (typeof name !== "string") throw new TypeError(`${op}() takes column names (str), got ${String(name)}`);
  }
  return [...(fields as string[])];
}

/** A feature written as a node dict (`{op, ...params}`), passed through unchanged. */
export type RawFeature = { op: string } & Record<string, Json>;
export type AnyFeature = Feature | RawFeature;

/** An event stream: a root event source and the wire steps applied to it. */
export class Stream<C extends Columns = Columns> {
  /** @internal */
  constructor(
    /** @internal */ readonly root: EventSource<Record<string, FieldSpec>>,
    /** @internal */ readonly steps: readonly Step[],
    /** @internal */ readonly columns: Readonly<C>,
    readonly name: string | undefined = undefined,
    /** @internal whether `event(name, chain)` declared it (it may then be registered) */
    readonly isEvent = false,
  ) {}

  protected extend<D extends Columns>(step: Step, columns: D): Stream<D> {
    return new Stream<D>(this.root, [...this.steps, step], columns);
  }

  /** @internal Whether chain methods built this stream from `stream` (or it is `stream`). */
  builtFrom(stream: Stream<Columns>): boolean {
    return this.root === stream.root && this.steps.length >= stream.steps.length &&
      stream.steps.every((s, i) => this.steps[i] === s);
  }

  /** Keep the events for which `expr` is true. */
  filter(expr: Expr): Stream<C> {
    if (!(expr instanceof Expr)) {
      throw new TypeError(`filter() takes an expression (bv.col(...) ...), got ${typeof expr}`);
    }
    return this.extend({ op: "filter", expr: expr.toExprString() }, this.columns);
  }

  /** Keep exactly these columns, in this order. */
  select<K extends keyof C & string>(...fields: K[]): Stream<Pick<C, K>> {
    const names = fieldNames("select", fields);
    const columns: Columns = {};
    for (const n of names) if (Object.hasOwn(this.columns, n)) columns[n] = this.columns[n] as WireType;
    return this.extend({ op: "select", fields: names }, columns as Pick<C, K>);
  }

  /** Remove these columns (names not present are ignored). */
  drop<K extends string>(...fields: K[]): Stream<Omit<C, K>> {
    const gone = new Set(fieldNames("drop", fields));
    const columns: Columns = {};
    for (const [n, t] of Object.entries(this.columns)) if (!gone.has(n)) columns[n] = t;
    return this.extend({ op: "drop", fields: [...fields] }, columns as Omit<C, K>);
  }

  /** Rename columns `{old: new}`, keeping their positions. */
  rename(mapping: Readonly<Record<string, string>>): Stream<Columns> {
    const entries = Object.entries(mapping);
    if (!entries.length) throw new ValueError("rename() needs at least one old=new entry");
    for (const [old, to] of entries) {
      if (typeof to !== "string") throw new TypeError(`rename() entries must map str to str, got '${old}': ${String(to)}`);
    }
    const columns: Columns = {};
    for (const [n, t] of Object.entries(this.columns)) columns[mapping[n] ?? n] = t;
    return this.extend({ op: "rename", mapping: { ...mapping } }, columns);
  }

  /** Add or overwrite columns; entries are evaluated in order, each seeing the ones before. */
  withColumns<N extends Record<string, Operand>>(exprs: N): Stream<Omit<C, keyof N> & { [K in keyof N]: WireType }> {
    return this.derive("with_columns", exprs) as Stream<Omit<C, keyof N> & { [K in keyof N]: WireType }>;
  }

  /** `withColumns` under the seed's name (emitted as `"op": "map"`). */
  map<N extends Record<string, Operand>>(exprs: N): Stream<Omit<C, keyof N> & { [K in keyof N]: WireType }> {
    return this.derive("map", exprs) as Stream<Omit<C, keyof N> & { [K in keyof N]: WireType }>;
  }

  private derive(op: string, exprs: Readonly<Record<string, Operand>>): Stream<Columns> {
    const entries = Object.entries(exprs);
    if (!entries.length) throw new ValueError(`${op}() needs at least one name=expression entry`);
    const columns: Columns = { ...this.columns };
    const rendered: Record<string, string> = {};
    for (const [name, value] of entries) {
      const expr = operand(value);
      const type = expr.inferType(columns);
      columns[name] = (type === undefined || type === "null" ? "str" : type) as WireType;
      rendered[name] = expr.toExprString();
    }
    return this.extend({ op, exprs: rendered }, columns);
  }

  /** Convert columns to `"str" "int" "float" "bool"`. */
  cast(typeMap: Readonly<Record<string, CastTarget>>): Stream<Columns> {
    const targets: Record<string, string> = {};
    const columns: Columns = { ...this.columns };
    for (const [name, target] of Object.entries(typeMap)) {
      targets[name] = castTarget(target);
      if (Object.hasOwn(columns, name)) columns[name] = CAST_TARGETS[targets[name] as string] as WireType;
    }
    return this.extend({ op: "cast", type_map: targets }, columns);
  }

  /** Replace nulls of these columns with a scalar. */
  fillna(defaults: Readonly<Partial<Record<keyof C & string, string | number | boolean>>>): Stream<C> {
    for (const [name, value] of Object.entries(defaults)) {
      if (value === null || value === undefined) throw new ValueError(`fillna(${name}=None) fills nothing; give a scalar value`);
      if (!["string", "number", "boolean"].includes(typeof value)) {
        throw new TypeError(`fillna() values must be str, int, float or bool, got ${typeof value}`);
      }
      if (typeof value === "number" && !Number.isFinite(value)) {
        throw new ValueError(`fillna(${name}=${value}): the value must be finite`);
      }
    }
    return this.extend({ op: "fillna", defaults: { ...defaults } as Record<string, Json> }, this.columns);
  }

  /** Group by these columns (none: one global group); follow with `.agg({...})`. */
  groupBy<K extends keyof C & string>(...keys: K[]): GroupBy<C, K> {
    const seen = new Set<string>();
    for (const key of keys) {
      if (typeof key !== "string" || !key) throw new TypeError(`group_by() keys must be non-empty str, got ${String(key)}`);
      if (seen.has(key)) throw new ValueError(`group_by() key '${key}' is repeated`);
      if (!Object.hasOwn(this.columns, key)) {
        throw new ValueError(withKnownNames(`group_by() key '${key}' is not a column here`, key, Object.keys(this.columns)));
      }
      seen.add(key);
    }
    return new GroupBy<C, K>(this, keys);
  }

  /** Global aggregation: `groupBy().agg(features)`. */
  agg<F extends Record<string, AnyFeature>>(features: F): Aggregation<C, never, F> {
    return new GroupBy<C, never>(this, []).agg(features);
  }

  /** A copy tagged with `name` (no effect on the wire). */
  named(name: string): Stream<C> {
    return new Stream<C>(this.root, this.steps, this.columns, name);
  }
}

export interface EventOptions<F extends Record<string, FieldSpec>> {
  /** Field defaults, set by the server when a push leaves the field out or null. */
  defaults?: { [K in keyof F]?: TsOf<BaseOf<F[K]>> };
  keepEventsFor?: string | number;
  coldAfter?: string | number;
  dedupeKey?: keyof F & string;
  dedupeWindow?: string | number;
}

function optionMs(value: unknown, name: string, allowForever: boolean): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === "number") {
    if (!Number.isInteger(value) || value <= 0 || BigInt(value) > MAX_DURATION_MS) {
      throw new ValueError(`${name} must be a positive number of milliseconds, got ${value}`);
    }
    return value;
  }
  if (typeof value !== "string") {
    throw new TypeError(`${name} must be a duration string or an int of milliseconds, got ${typeof value}`);
  }
  if (value === CATALOGUE.durations.forever && allowForever) return undefined;
  checkDuration(value, name, false);
  return Number(durationMs(value));
}

function defaultOk(type: WireType, value: unknown): boolean {
  if (type === "bool") return typeof value === "boolean";
  if (type === "i64") return typeof value === "number" && Number.isInteger(value);
  if (type === "f64") return typeof value === "number" && Number.isFinite(value);
  return typeof value === "string";
}

/** An event source: a named schema of typed fields that pushes carry. */
export class EventSource<F extends Record<string, FieldSpec> = Record<string, FieldSpec>> extends Stream<ColumnsOf<F>> {
  /** @internal */ readonly fieldTypes: Readonly<Columns>;
  /** @internal */ readonly optionalFields: readonly string[];
  /** @internal */ readonly defaults: Readonly<Record<string, Json>>;
  /** @internal */ readonly options: Readonly<Record<string, Json>>;
  /** Only for typing: the fields a push carries. */
  declare readonly __fields?: EventFields<F>;

  /** @internal */
  constructor(name: string, fields: F, options: EventOptions<F>) {
    const types: Columns = {};
    const optionals: string[] = [];
    const entries = Object.entries(fields);
    if (!entries.length) throw new TypeError(`event ${name} declares no field`);
    for (const [field, spec] of entries) {
      if (field === "event_time") {
        throw new TypeError(`event ${name}: a field named 'event_time' is not supported; beava uses processing time only`);
      }
      const type = typeof spec === "string" ? spec : spec?.optional;
      if (typeof type !== "string" || !WIRE_TYPES.has(type)) {
        throw new TypeError(`event ${name}: field '${field}' has unsupported type ${JSON.stringify(spec)}; ` +
          "use \"str\", \"i64\", \"f64\", \"bool\" or optional(...) of one of them");
      }
      types[field] = type as WireType;
      if (typeof spec !== "string") optionals.push(field);
    }
    const known = new Set(["defaults", "keepEventsFor", "coldAfter", "dedupeKey", "dedupeWindow"]);
    for (const key of Object.keys(options)) {
      if (!known.has(key)) throw new TypeError(`unknown event option '${key}'; expected one of ${[...known].join(", ")}`);
    }
    const defaults: Record<string, Json> = {};
    for (const [field, value] of Object.entries(options.defaults ?? {})) {
      const type = types[field];
      if (type === undefined) throw new ValueError(`default of '${field}': not a field of ${name}`);
      if (value === undefined || value === null) continue;
      if (!defaultOk(type, value)) {
        throw new TypeError(`event ${name}: default ${JSON.stringify(value)} of field '${field}' does not match its type ${type}`);
      }
      defaults[field] = value as Json;
    }
    const keepMs = optionMs(options.keepEventsFor, "keep_events_for", true);
    const coldMs = optionMs(options.coldAfter, "cold_after", true);
    const dedupeKey = options.dedupeKey;
    if (dedupeKey !== undefined) {
      if (typeof dedupeKey !== "string") throw new TypeError(`dedupe_key must be a str, got ${typeof dedupeKey}`);
      if (!Object.hasOwn(types, dedupeKey)) throw new ValueError(`dedupe_key '${dedupeKey}' is not a field of ${name}`);
    }
    const dedupeMs = optionMs(options.dedupeWindow, "dedupe_window", false);
    if (options.dedupeWindow !== undefined && dedupeKey === undefined) {
      throw new ValueError("dedupe_window requires dedupe_key");
    }
    const wire: Record<string, Json> = {};
    if (keepMs !== undefined) wire["keep_events_for_ms"] = keepMs;
    if (coldMs !== undefined) wire["cold_after_ms"] = coldMs;
    if (dedupeKey !== undefined) wire["dedupe_key"] = dedupeKey;
    if (dedupeMs !== undefined) wire["dedupe_window_ms"] = dedupeMs;
    // The root of a source's own stream is the source itself (set just below).
    super(undefined as unknown as EventSource, [], types as ColumnsOf<F>, name, true);
    (this as { root: EventSource }).root = this as unknown as EventSource;
    this.fieldTypes = types;
    this.optionalFields = optionals;
    this.defaults = defaults;
    this.options = wire;
  }

  /** The register node (spec/sdk.md §7.2). */
  node(): Record<string, Json> {
    const schema: Record<string, Json> = { fields: { ...this.fieldTypes }, optional_fields: [...this.optionalFields] };
    if (Object.keys(this.defaults).length) schema["defaults"] = { ...this.defaults };
    return { kind: "event", name: this.name as string, schema, ...this.options };
  }
}

/** The result of `groupBy`: its only method is `agg`. */
export class GroupBy<C extends Columns, K extends keyof C & string> {
  /** @internal */
  constructor(readonly source: Stream<C>, readonly keys: readonly K[]) {}

  /** Name the features: each an operator result (`bv.count()`) or a dict with an `op` key. */
  agg<F extends Record<string, AnyFeature>>(features: F): Aggregation<C, K, F> {
    const entries = Object.entries(features);
    if (!entries.length) throw new ValueError("agg() needs at least one feature, e.g. agg({ n: bv.count() })");
    const agg: Record<string, Json> = {};
    const types: Record<string, string> = {};
    const whereReads: Record<string, readonly string[]> = {};
    for (const [name, feature] of entries) {
      let op: unknown;
      let params: Record<string, Json>;
      if (feature instanceof Feature) {
        op = feature.op;
        params = { ...feature.params };
        whereReads[name] = feature.whereColumns;
      } else if (feature !== null && typeof feature === "object" && "op" in feature) {
        const { op: raw, ...rest } = feature as RawFeature;
        op = raw;
        params = rest;
      } else {
        throw new TypeError(`agg(${name}=...) must be an operator such as bv.count() or a dict with an 'op' key, got ${typeof feature}`);
      }
      agg[name] = { op: op as Json, params };
      types[name] = featureType(op, params["field"], this.source.columns);
    }
    return new Aggregation<C, K, F>(this.source, this.keys, agg, types, whereReads);
  }
}

/** The schema type declared for a feature (§7.4): the catalogue's, or its field's for the ops returning it. */
function featureType(op: unknown, field: unknown, columns: Readonly<Columns>): string {
  const spec = typeof op === "string" ? lookup(op) : undefined;
  if (spec === undefined) return "str";
  if (spec.wire_type !== null) return spec.wire_type;
  return typeof field === "string" ? (columns[field] ?? "str") : "str";
}

/** `groupBy(...).agg(...)`: what `table()` takes. */
export class Aggregation<C extends Columns, K extends keyof C & string, F extends Record<string, AnyFeature>> {
  declare readonly __row?: { [P in K]: TsOf<C[P]> } & { [P in keyof F]: ValueOf<F[P]> };

  /** @internal */
  constructor(
    readonly source: Stream<C>,
    readonly keys: readonly K[],
    private readonly agg: Readonly<Record<string, Json>>,
    private readonly types: Readonly<Record<string, string>>,
    private readonly whereReads: Readonly<Record<string, readonly string[]>>,
  ) {}

  /** @internal The first `[feature, param, column]` naming a column the events do not have. */
  unknownColumn(): [string, string, string] | undefined {
    const columns = this.source.columns;
    for (const [feature, entry] of Object.entries(this.agg)) {
      const { op, params } = entry as { op: Json; params: Record<string, Json> };
      const field = params["field"];
      const spec = typeof op === "string" ? lookup(op) : undefined;
      if (spec && (spec.field === "checked" || spec.field === "required") && typeof field === "string" &&
          !Object.hasOwn(columns, field)) {
        return [feature, "field", field];
      }
      for (const name of this.whereReads[feature] ?? []) {
        if (!Object.hasOwn(columns, name)) return [feature, "where", name];
      }
    }
    return undefined;
  }

  /** @internal The wire step `{"op": "group_by", "keys", "agg"}`. */
  groupByStep(): Step {
    return { op: "group_by", keys: [...this.keys], agg: cloneJson(this.agg) as Json };
  }

  /** @internal Key columns (tracked types), then the features. */
  outputSchema(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const key of this.keys) out[key] = this.source.columns[key] ?? "str";
    return { ...out, ...this.types };
  }
}

/** A table: the features of an aggregation, by key. `Row` is the type of a row read back. */
export class Table<Row = Record<string, unknown>> {
  declare readonly __row?: Row;

  /** @internal */
  constructor(readonly name: string, readonly keys: readonly string[], private readonly aggregation: Aggregation<Columns, string, Record<string, AnyFeature>>) {}

  /** @internal The event source at the root of the table's chain. */
  get root(): EventSource {
    return this.aggregation.source.root;
  }

  /** The register node (spec/sdk.md §7.3); the chain is flattened from the root source. */
  node(): Record<string, Json> {
    const agg = this.aggregation;
    return {
      kind: "derivation",
      name: this.name,
      output_kind: "table",
      upstreams: [agg.source.root.name as string],
      ops: cloneJson([...agg.source.steps, agg.groupByStep()]) as Json,
      schema: { fields: agg.outputSchema(), optional_fields: [] },
      table_primary_key: [...this.keys],
    };
  }
}

/** A row of table `T` as read back: every feature may be absent (an unknown entity reads `{}`). */
export type RowOf<T> = T extends Table<infer R> ? Partial<R> : Record<string, unknown>;

type Keys<K extends string> = K | readonly K[];

function keyList(key: unknown): string[] {
  if (key === undefined || key === null) return [];
  const names = typeof key === "string" ? [key] : Array.isArray(key) ? [...(key as unknown[])] : undefined;
  if (names === undefined) throw new TypeError(`key must be a str or a list of str, got ${typeof key}`);
  for (const name of names) {
    if (typeof name !== "string") throw new TypeError(`key names must be str, got ${String(name)}`);
    if (!name) throw new ValueError("key names must be non-empty");
  }
  if (new Set(names).size !== names.length) throw new ValueError(`key names must be distinct, got ${JSON.stringify(names)}`);
  return names as string[];
}

/**
 * Declare a table: `table("UserSpend", { key: "user_id" }, Txn.groupBy("user_id").agg({...}))`
 * (a list for a composite key); `table("Totals", Txn.agg({...}))` declares a global table.
 */
export function table<C extends Columns, K extends keyof C & string, F extends Record<string, AnyFeature>>(
  name: string, options: { key: Keys<K> }, aggregation: Aggregation<C, K, F>,
): Table<{ [P in K]: TsOf<C[P]> } & { [P in keyof F]: ValueOf<F[P]> }>;
export function table<C extends Columns, F extends Record<string, AnyFeature>>(
  name: string, aggregation: Aggregation<C, never, F>,
): Table<{ [P in keyof F]: ValueOf<F[P]> }>;
export function table(name: string, a: unknown, b?: unknown): Table<unknown> {
  const [options, aggregation] = b === undefined ? [{}, a] : [a, b];
  if (typeof name !== "string" || !name) throw new TypeError("table() takes a name string first");
  const keys = keyList((options as { key?: unknown }).key);
  if (!(aggregation instanceof Aggregation)) {
    throw new DescriptorError({
      code: "bad_return_type", path: name,
      message: `${name} must be given events.groupBy(...).agg(...) or events.agg(...), got ${typeof aggregation}`,
    });
  }
  const agg = aggregation as Aggregation<Columns, string, Record<string, AnyFeature>>;
  if (JSON.stringify(agg.keys) !== JSON.stringify(keys)) {
    throw new DescriptorError({
      code: "table_key_invalid", path: name,
      message: `${name}: group_by keys ${JSON.stringify(agg.keys)} differ from the table key ${JSON.stringify(keys)} ` +
        "(same names, same order; none for a global table)",
    });
  }
  const unknown = agg.unknownColumn();
  if (unknown !== undefined) {
    const [feature, param, column] = unknown;
    const text = param === "field"
      ? `field '${column}' does not exist in upstream schema`
      : `where predicate references unknown field '${column}'`;
    throw new DescriptorError({
      code: param === "field" ? "aggregation_unknown_field" : "aggregation_invalid_where",
      path: `${name}.ops[${agg.source.steps.length}].agg.${feature}.params.${param}`,
      message: withKnownNames(text, column, Object.keys(agg.source.columns)),
    });
  }
  return new Table(name, keys, agg);
}

/**
 * `event("Txn", { user_id: "str", amount: "f64" }, options?)` declares an event source;
 * `event("Big", Txn.filter(...))` names a derived event (the Python SDK's `@bv.event def`).
 */
export function event<const F extends Record<string, FieldSpec>>(name: string, fields: F, options?: EventOptions<F>): EventSource<F>;
export function event<C extends Columns>(name: string, chain: Stream<C>): Stream<C>;
export function event(name: string, spec: unknown, options?: unknown): unknown {
  if (typeof name !== "string" || !name) throw new TypeError("event() takes a name string first");
  if (spec instanceof Stream) {
    if (options !== undefined) throw new TypeError(`event options apply to event sources, not to the derived event '${name}'`);
    const root = spec.root;
    if (spec === root || spec.steps.length === 0) {
      throw new DescriptorError({ code: "bad_return_type", path: name, message: `${name}: returns its upstream unchanged; add at least one chain step` });
    }
    return new Stream(root, spec.steps, spec.columns, name, true);
  }
  if (spec === null || typeof spec !== "object") throw new TypeError(`event ${name}: give its fields as an object`);
  return new EventSource(name, spec as Record<string, FieldSpec>, (options ?? {}) as EventOptions<Record<string, FieldSpec>>);
}

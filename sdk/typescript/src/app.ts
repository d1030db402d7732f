/**
 * `App`: register, push and read over framed TCP (`tcp://`, `tcps://`; MessagePack or JSON)
 * or HTTP (`http://`, `https://`), the TypeScript twin of the Python SDK's `bv.App`. Server
 * errors become the SDK's typed errors (`PushError`, `ReadError`, `RegistrationError`, ...);
 * a lost connection rejects every request in flight with a `TransportError` and the next
 * call reconnects.
 */
import { compile, type RegisterOptions, type RegisterPayload } from "./compile.js";
import { readFileSync } from "node:fs";
import { serverError } from "./errors.js";
import type { Json } from "./json.js";
import { HttpConnection } from "./http.js";
import { EventSource, type EventFields, type FieldSpec, type RowOf, Table } from "./pipeline.js";
import { CT_JSON, CT_MSGPACK, encodeBody, OP, type Reply, TcpConnection } from "./tcp.js";

export interface AppOptions {
  /** An access token (default: `$BEAVA_TOKEN`). */
  token?: string;
  /** PEM of the CA of the server's certificate, for `tcps://` / `https://` (default: `$BEAVA_CA`, a file path). */
  ca?: string | Buffer;
  /** Body encoding of pushes and reads on framed TCP (default `msgpack`). */
  contentType?: "msgpack" | "json";
  /** Limit for each reply, in ms (default 30 000; 0: none). */
  timeoutMs?: number;
}

/** An entity key: a string, an integer, a boolean, their list for a composite key, or null for the global row. */
export type Key = string | number | boolean | null | readonly (string | number | boolean)[];
export type Row = Record<string, unknown>;
export type BatchRequest = readonly [string | Table<unknown>, Key, (readonly string[])?] | { table: string; key: Key; features?: readonly string[] };

export interface PushAck {
  ack_lsn: number;
  idempotent_replay: boolean;
  registry_version: number;
}

export interface PushManyResult {
  acks: number;
  ack_lsn: number | null;
  errors: { index: number; error: Record<string, unknown> }[];
  registry_version: number | null;
  replays: number;
}

const PUSH_MANY_MAX_BODIES = 10_000;
const DAY = 86_400_000;

function component(value: unknown): string {
  if (typeof value === "string") return value;
  if (typeof value === "boolean") return value ? "true" : "false";
  if (typeof value === "number" && Number.isInteger(value)) return String(value);
  throw new TypeError(`key components must be string, integer or boolean, got ${JSON.stringify(value)}`);
}

/** The key as sent (spec/sdk.md §8.5): null is the global row `""`; a list joins with `|`. */
export function encodeKey(key: Key): string | string[] {
  if (key === null) return "";
  if (Array.isArray(key)) {
    const parts = key.map(component);
    return parts.some((p) => p.includes("|")) ? parts : parts.join("|");
  }
  return component(key);
}

function tableName(table: unknown): string {
  if (table instanceof Table) return table.name;
  if (typeof table !== "string" || !table) throw new TypeError(`table must be a Table or a non-empty string, got ${JSON.stringify(table)}`);
  return table;
}

function eventName(event: unknown): string {
  if (event instanceof EventSource) return event.name as string;
  if (typeof event !== "string" || !event) throw new TypeError(`event name must be a non-empty string, got ${JSON.stringify(event)}`);
  return event;
}

function checkRow(fields: unknown): Record<string, unknown> {
  if (fields === null || typeof fields !== "object" || Array.isArray(fields)) {
    throw new TypeError(`event fields must be an object, got ${JSON.stringify(fields)}`);
  }
  return fields as Record<string, unknown>;
}

function isPlain(obj: unknown): obj is Record<string, unknown> {
  return obj !== null && typeof obj === "object" && Object.getPrototypeOf(obj) === Object.prototype;
}

export class App {
  readonly url: string;
  private readonly tcp: TcpConnection | undefined;
  private readonly http: HttpConnection | undefined;
  private readonly ct: number;
  private pinnedMs: number | undefined;

  constructor(url: string | undefined = process.env["BEAVA_URL"], options: AppOptions = {}) {
    if (!url) throw new TypeError("App needs a server URL (tcp://, tcps://, http:// or https://) or $BEAVA_URL");
    const parsed = new URL(url);
    const scheme = parsed.protocol.replace(/:$/, "");
    if (!["tcp", "tcps", "http", "https"].includes(scheme)) {
      throw new TypeError(`unsupported URL scheme '${scheme}' in ${url}; expected tcp, tcps, http or https`);
    }
    const host = parsed.hostname.replace(/^\[|\]$/g, "");
    const port = Number(parsed.port || (scheme === "https" ? 443 : scheme === "http" ? 80 : NaN));
    if (!Number.isInteger(port)) throw new TypeError(`the URL ${url} has no port`);
    const token = options.token ?? process.env["BEAVA_TOKEN"];
    const caPath = process.env["BEAVA_CA"];
    const ca = options.ca ?? (caPath ? readFileSync(caPath) : undefined);
    const tls = scheme === "tcps" || scheme === "https";
    const common = { tls, timeoutMs: options.timeoutMs ?? 30_000, ...(ca ? { ca } : {}), ...(token ? { token } : {}) };
    this.url = url;
    this.ct = options.contentType === "json" ? CT_JSON : CT_MSGPACK;
    if (scheme.startsWith("tcp")) this.tcp = new TcpConnection(host, port, common);
    else this.http = new HttpConnection(host, port, common);
  }

  private async call(op: number, route: [method: "GET" | "POST", path: string], body: unknown, ct = this.ct, nodes: readonly unknown[] = []): Promise<unknown> {
    let reply: Reply;
    if (this.tcp !== undefined) {
      reply = await this.tcp.request(op, ct, body === undefined ? new Uint8Array() : encodeBody(body, ct));
    } else {
      reply = await (this.http as HttpConnection).request(route[0], route[1], body);
    }
    if (!reply.ok) throw serverError(reply.body, nodes);
    return reply.body;
  }

  /**
   * Register the pipeline (the whole desired registry): descriptors (events, tables, node
   * dicts) or one payload `{nodes}`, optionally followed by `{ force, dryRun }`.
   */
  async register(...args: unknown[]): Promise<Record<string, unknown>> {
    let options: RegisterOptions = {};
    const last = args[args.length - 1];
    if (isPlain(last) && Object.keys(last).every((k) => k === "force" || k === "dryRun") && Object.keys(last).length) {
      options = last as RegisterOptions;
      args = args.slice(0, -1);
    }
    let payload: RegisterPayload;
    const first = args[0];
    if (args.length === 1 && isPlain(first) && Array.isArray(first["nodes"])) {
      payload = { ...(first as unknown as RegisterPayload) };
      if (options.force) payload.force = true;
      if (options.dryRun) payload.dry_run = true;
    } else {
      payload = compile(args, options);
    }
    return await this.call(OP.REGISTER, ["POST", "/register"], payload, CT_JSON, payload.nodes) as Record<string, unknown>;
  }

  /**
   * Push one event. `dedupeKey` sets the event's `dedupe_key` field (an event declared with
   * `dedupeKey`, given as the event object): a repeat within the window is acknowledged once.
   */
  async push<F extends Record<string, FieldSpec>>(event: EventSource<F>, fields: EventFields<F>, options?: { dedupeKey?: string | number }): Promise<PushAck>;
  async push(event: string, fields: Record<string, unknown>, options?: { dedupeKey?: string | number }): Promise<PushAck>;
  async push(event: unknown, fields: unknown, options: { dedupeKey?: string | number } = {}): Promise<PushAck> {
    const name = eventName(event);
    let body = checkRow(fields);
    if (options.dedupeKey !== undefined) {
      const field = event instanceof EventSource ? event.options["dedupe_key"] : undefined;
      if (typeof field !== "string") {
        throw new TypeError("dedupeKey needs the event object of an event declared with a dedupeKey field");
      }
      body = { ...body, [field]: options.dedupeKey };
    }
    const envelope = this.tcp !== undefined ? { event: name, body } : { event: name, data: body };
    return await this.call(OP.PUSH, ["POST", "/push"], envelope) as PushAck;
  }

  /**
   * Push rows in pipelined batches of at most `chunkSize` (`OP_PUSH_MANY` / `POST
   * /push_many`); per-row errors are returned (`errors[i].index` into `rows`), not thrown.
   */
  async pushMany<F extends Record<string, FieldSpec>>(event: EventSource<F>, rows: readonly EventFields<F>[], options?: { chunkSize?: number }): Promise<PushManyResult>;
  async pushMany(event: string, rows: readonly Record<string, unknown>[], options?: { chunkSize?: number }): Promise<PushManyResult>;
  async pushMany(event: unknown, rows: readonly unknown[], options: { chunkSize?: number } = {}): Promise<PushManyResult> {
    const name = eventName(event);
    const size = options.chunkSize ?? 1000;
    if (!Number.isInteger(size) || size < 1 || size > PUSH_MANY_MAX_BODIES) {
      throw new RangeError(`chunkSize must be an integer in [1, ${PUSH_MANY_MAX_BODIES}], got ${size}`);
    }
    const bodies = rows.map(checkRow);
    const chunks: Record<string, unknown>[][] = [];
    for (let i = 0; i < bodies.length; i += size) chunks.push(bodies.slice(i, i + size));
    let replies: Reply[];
    if (this.tcp !== undefined) {
      replies = await this.tcp.pipeline(chunks.map((c) => [OP.PUSH_MANY, this.ct, encodeBody({ event: name, bodies: c }, this.ct)]));
    } else {
      const http = this.http as HttpConnection;
      replies = await Promise.all(chunks.map((c) => http.request("POST", "/push_many", { event: name, bodies: c })));
    }
    const out: PushManyResult = { acks: 0, ack_lsn: null, errors: [], registry_version: null, replays: 0 };
    replies.forEach((reply, i) => {
      if (!reply.ok) {
        const err = serverError(reply.body);
        err.details["acked_before"] = out.acks;
        throw err;
      }
      const r = reply.body as { acks: number; ack_lsn: number | null; errors: { index: number; error: Record<string, unknown> }[]; registry_version: number; replays?: number };
      out.acks += r.acks;
      out.replays += r.replays ?? 0;
      if (r.ack_lsn !== null && r.ack_lsn !== undefined) out.ack_lsn = r.ack_lsn;
      out.registry_version = r.registry_version;
      for (const e of r.errors) out.errors.push({ index: e.index + i * size, error: e.error });
    });
    return out;
  }

  /** The feature row of `key` (null: the global row); `{}` when the entity is unknown. */
  async get<T extends Table<unknown>>(table: T, key?: Key, options?: { features?: readonly (keyof RowOf<T> & string)[] }): Promise<RowOf<T>>;
  async get(table: string, key?: Key, options?: { features?: readonly string[] }): Promise<Row>;
  async get(table: unknown, key: Key = null, options: { features?: readonly string[] } = {}): Promise<Row> {
    const body: Record<string, Json> = { table: tableName(table), key: encodeKey(key) };
    if (options.features !== undefined) body["features"] = [...options.features];
    return await this.call(OP.GET, ["POST", "/get"], body) as Row;
  }

  /** Rows for `[table, key, features?]` entries, in order; per-entry errors come back inline as `{error}`. */
  async batchGet(requests: readonly BatchRequest[]): Promise<Row[]> {
    const entries = requests.map((entry) => {
      if (Array.isArray(entry)) {
        const [table, key, features] = entry as unknown as [unknown, Key, (readonly string[])?];
        const out: Record<string, Json> = { table: tableName(table), key: encodeKey(key) };
        if (features !== undefined) out["features"] = [...features];
        return out;
      }
      if (isPlain(entry)) return entry;
      throw new TypeError(`batchGet entries must be [table, key, features?] or {table, key, features?}, got ${JSON.stringify(entry)}`);
    });
    const reply = await this.call(OP.BATCH_GET, ["POST", "/batch_get"], { requests: entries }) as { results: Row[] };
    return reply.results;
  }

  /** The legacy multi-read (`OP_GET_MULTI`, framed TCP): `{key: {feature: value}}` over every table holding the features. */
  async getMulti(keys: readonly Key[], features: readonly string[]): Promise<Record<string, Row>> {
    if (this.tcp === undefined) throw new TypeError("getMulti is a framed-TCP request (OP_GET_MULTI); use batchGet over HTTP");
    return await this.call(OP.GET_MULTI, ["POST", "/get_multi"], { keys: keys.map(encodeKey), features: [...features] }) as Record<string, Row>;
  }

  /** What the registry holds: `{version, node_count, nodes}`. */
  async describe(): Promise<Record<string, unknown>> {
    return await this.call(OP.DESCRIBE, ["GET", "/describe"], undefined, CT_JSON) as Record<string, unknown>;
  }

  /** Liveness and `registry_version`. */
  async ping(): Promise<Record<string, unknown>> {
    return await this.call(OP.PING, ["POST", "/ping"], {}, CT_JSON) as Record<string, unknown>;
  }

  /**
   * Drop every registered descriptor and all state (test mode only); the clock returns to the
   * wall clock. Resolves with the server's reply, `{reset: true, registry_version}`.
   */
  async reset(): Promise<Record<string, unknown>> {
    const reply = await this.call(OP.RESET, ["POST", "/reset"], {}, CT_JSON) as Record<string, unknown>;
    this.pinnedMs = undefined;
    return reply;
  }

  /** Pin the server's clock (test mode only) at epoch ms or a Date; null returns to the wall clock. */
  async setTime(when: number | Date | null): Promise<void> {
    const ms = when === null ? null : when instanceof Date ? when.getTime() : when;
    if (ms !== null && (!Number.isSafeInteger(ms) || ms < 0)) throw new RangeError(`setTime takes epoch milliseconds >= 0 or a Date, got ${String(when)}`);
    await this.call(OP.TEST_CLOCK, ["POST", "/test/clock"], { now_ms: ms }, CT_JSON);
    this.pinnedMs = ms ?? undefined;
  }

  /** Move the pinned clock forward (from the time last set, else from now). */
  async advance(by: { days?: number; hours?: number; minutes?: number; seconds?: number; milliseconds?: number }): Promise<void> {
    const delta = (by.days ?? 0) * DAY + (by.hours ?? 0) * 3_600_000 + (by.minutes ?? 0) * 60_000 +
      (by.seconds ?? 0) * 1000 + (by.milliseconds ?? 0);
    await this.setTime(Math.round((this.pinnedMs ?? Date.now()) + delta));
  }

  /** Close the connection (requests in flight are rejected). */
  close(): void {
    this.tcp?.close();
    this.http?.close();
  }
}


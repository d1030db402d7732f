/**
 * Errors, mirroring the Python SDK's (beava/errors.py): `RegistrationError` carries a wire
 * code, the path and the message; `PushError` / `ReadError` / `FeatureNotFoundError` also
 * read the server's informative keys (`field`, `expected`, `got`, `hint`). `ValueError` is
 * a DSL argument out of its allowed values (Python's ValueError; wrong types are TypeError).
 */

export type { Json } from "./json.js";

/** A DSL argument with the right type and a value it does not allow. */
export class ValueError extends Error {
  override name = "ValueError";
}

export interface RegistrationErrorInit {
  code: string;
  path?: string;
  message?: string;
  /** The whole decoded error body, for server errors. */
  details?: Record<string, unknown>;
}

/** An error the server reported, or a client-side check with a wire code. */
export class RegistrationError extends Error {
  override name = "RegistrationError";
  readonly code: string;
  readonly path: string;
  readonly details: Record<string, unknown>;
  /** The message without the `[code] path:` prefix. */
  readonly text: string;

  constructor(init: RegistrationErrorInit) {
    const text = init.message ?? "";
    super(init.path ? `[${init.code}] ${init.path}: ${text}` : `[${init.code}] ${text}`);
    this.code = init.code;
    this.path = init.path ?? "";
    this.text = text;
    this.details = init.details ?? {};
  }

  private key(name: string): unknown {
    const error = this.details["error"];
    return error !== null && typeof error === "object" && !Array.isArray(error)
      ? (error as Record<string, unknown>)[name]
      : undefined;
  }

  /** The field the server names (push and read errors), if any. */
  get field(): unknown {
    return this.key("field");
  }

  /** What the server expected (a type, or the nearest registered names). */
  get expected(): unknown {
    return this.key("expected");
  }

  /** What the server got. */
  get got(): unknown {
    return this.key("got");
  }

  /** The server's suggestion, if any. */
  get hint(): string | undefined {
    const hint = this.key("hint");
    return typeof hint === "string" ? hint : undefined;
  }
}

/** A structural error found while declaring a pipeline (`bad_return_type`, ...). */
export class DescriptorError extends RegistrationError {
  override name = "DescriptorError";
}

/** A push the server refused for its data (`invalid_event`, `unknown_field_v0`, ...). */
export class PushError extends RegistrationError {
  override name = "PushError";
}

/** A read naming something the registry does not hold (`unknown_table`, ...). */
export class ReadError extends RegistrationError {
  override name = "ReadError";
}

/** A read named a feature the table does not have; `missing` lists the unknown names. */
export class FeatureNotFoundError extends ReadError {
  override name = "FeatureNotFoundError";

  get missing(): string[] {
    const got = this.got;
    return Array.isArray(got) ? got.filter((g): g is string => typeof g === "string") : [];
  }
}

/**
 * The connection failed (refused, reset, closed, a broken frame) or timed out. Every request
 * in flight on it is rejected with this error; the next call opens a new connection.
 */
export class TransportError extends Error {
  override name = "TransportError";
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(`[${code}] ${message}`, options);
    this.code = code;
  }
}

// Codes of a push refused for its data, and of a read naming what is not registered
// (the same sets as beava/app.py).
const PUSH_CODES = new Set([
  "invalid_event", "unknown_field_v0", "unknown_field_event_time_v0", "event_not_found",
  "control_character_in_string", "invalid_push_many", "batch_too_large",
]);
const READ_CODES = new Set(["unknown_table", "key_parse_failure", "feature_not_found", "key_not_found"]);

function str(obj: Record<string, unknown>, name: string): string {
  const value = obj[name];
  return typeof value === "string" ? value : "";
}

/**
 * The SDK error for a server error body (any envelope of spec/wire.md §5.1: `{"error":
 * {...}}` or the flat `{"code": ...}`), its class chosen by the code. `nodes`: the
 * registered payload's, so that a register error's `nodes[i]` path names the descriptor.
 */
export function serverError(body: unknown, nodes: readonly unknown[] = []): RegistrationError {
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    return new RegistrationError({ code: "unparseable_error", message: String(body).slice(0, 200) });
  }
  const details = body as Record<string, unknown>;
  const inner = details["error"];
  const error = inner !== null && typeof inner === "object" && !Array.isArray(inner)
    ? (inner as Record<string, unknown>)
    : details;
  const code = str(error, "code") || "unknown";
  let message = str(error, "reason") || str(error, "message");
  const hint = error["hint"];
  if (typeof hint === "string" && hint && !message.includes(hint)) {
    message = message ? `${message} (${hint})` : hint;
  }
  const init = { code, path: namedPath(str(error, "path"), nodes), message, details };
  if (PUSH_CODES.has(code)) return new PushError(init);
  if (error["detail"] === "feature_not_found") return new FeatureNotFoundError(init);
  if (READ_CODES.has(code)) return new ReadError(init);
  return new RegistrationError(init);
}

function namedPath(path: string, nodes: readonly unknown[]): string {
  const found = /^nodes\[(\d+)\]/.exec(path);
  if (found === null) return path;
  const node = nodes[Number(found[1])];
  const name = node !== null && typeof node === "object" ? (node as Record<string, unknown>)["name"] : undefined;
  return typeof name === "string" ? name + path.slice(found[0].length) : path;
}

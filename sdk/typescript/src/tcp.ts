/**
 * The framed-TCP client (spec/wire.md §2): `[u32 length][u16 op][u8 ct][payload]`,
 * big-endian, over `node:net` or `node:tls`. Requests are pipelined on one connection and
 * answered in order, so replies are matched to requests strictly first in, first out. A
 * lost connection rejects every request in flight with a `TransportError`; the next request
 * opens a new connection (sending `OP_AUTH` first when a token is set).
 */
import { decode, encode } from "@msgpack/msgpack";
import { connect as netConnect, type Socket } from "node:net";
import { connect as tlsConnect } from "node:tls";
import { serverError, TransportError } from "./errors.js";
import { jsonText } from "./json.js";

export const OP = {
  PING: 0x0000, REGISTER: 0x0001, AUTH: 0x0002, PUSH: 0x0010, PUSH_MANY: 0x0012, GET: 0x0020,
  GET_MULTI: 0x0022, GET_RESPONSE: 0x0023, BATCH_GET: 0x0024, DESCRIBE: 0x0026, RESET: 0x0040,
  TEST_CLOCK: 0x0041, ERROR: 0xffff,
} as const;
export const CT_JSON = 0x01;
export const CT_MSGPACK = 0x02;
const MAX_FRAME_BYTES = 4 * 1024 * 1024;
const HTTP_REPLY_LENGTH = 0x48545450; // "HTTP" read as a length: an HTTP port

// The success reply opcode is not uniform: writes echo their op, reads and RESET answer 0x0023.
const REPLY_OP: Readonly<Record<number, number>> = {
  [OP.PING]: OP.PING, [OP.REGISTER]: OP.REGISTER, [OP.AUTH]: OP.AUTH, [OP.PUSH]: OP.PUSH,
  [OP.PUSH_MANY]: OP.PUSH_MANY, [OP.GET]: OP.GET_RESPONSE, [OP.GET_MULTI]: OP.GET_RESPONSE,
  [OP.BATCH_GET]: OP.GET_RESPONSE, [OP.DESCRIBE]: OP.GET_RESPONSE, [OP.RESET]: OP.GET_RESPONSE,
  [OP.TEST_CLOCK]: OP.TEST_CLOCK,
};

/** A decoded reply: `ok` false for an error frame (op 0xFFFF) or an unexpected opcode. */
export interface Reply {
  ok: boolean;
  body: unknown;
}

interface Pending {
  op: number;
  resolve: (reply: Reply) => void;
  reject: (err: Error) => void;
}

export interface TcpOptions {
  tls?: boolean;
  /** PEM of the CA that signed the server's certificate (default: the system's). */
  ca?: string | Buffer;
  token?: string;
  /** Idle-free limit for a reply, in ms (0: none). */
  timeoutMs?: number;
}

export function encodeBody(body: unknown, ct: number): Uint8Array {
  return ct === CT_MSGPACK ? encode(body) : Buffer.from(jsonText(body));
}

export function frame(op: number, ct: number, payload: Uint8Array): Buffer {
  if (payload.length > MAX_FRAME_BYTES) {
    throw new RangeError(`request payload of ${payload.length} bytes exceeds max_frame_bytes=${MAX_FRAME_BYTES}`);
  }
  const out = Buffer.allocUnsafe(7 + payload.length);
  out.writeUInt32BE(payload.length + 3, 0);
  out.writeUInt16BE(op, 4);
  out.writeUInt8(ct, 6);
  out.set(payload, 7);
  return out;
}

function decodePayload(payload: Buffer, ct: number): unknown {
  if (payload.length === 0) return {};
  try {
    return ct === CT_MSGPACK ? decode(payload) : JSON.parse(payload.toString("utf8"));
  } catch {
    return { error: { code: "unparseable_reply", message: payload.subarray(0, 200).toString("utf8") } };
  }
}

export class TcpConnection {
  private socket: Socket | undefined;
  private ready: Promise<Socket> | undefined;
  private readonly pending: Pending[] = [];
  private head = 0; // index of the oldest pending request (the queue is compacted lazily)
  private chunks: Buffer[] = [];
  private buffered = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(readonly host: string, readonly port: number, private readonly options: TcpOptions = {}) {}

  /** Requests sent and not yet answered. */
  get inFlight(): number {
    return this.pending.length - this.head;
  }

  private open(): Promise<Socket> {
    if (this.ready) return this.ready;
    const ready = new Promise<Socket>((resolve, reject) => {
      const { tls, ca, token } = this.options;
      const socket = tls
        ? tlsConnect({ host: this.host, port: this.port, servername: this.host, ...(ca ? { ca } : {}) })
        : netConnect({ host: this.host, port: this.port });
      socket.setNoDelay(true);
      const onError = (err: Error): void => {
        const failure = new TransportError("connection_failed", `cannot reach ${this.host}:${this.port}: ${err.message}`, { cause: err });
        if (this.ready === ready) this.fail(failure);
        reject(failure);
      };
      socket.once("error", onError);
      socket.once(tls ? "secureConnect" : "connect", () => {
        socket.off("error", onError);
        // Events of a connection already given up (a timeout, a refused token) must not touch
        // the one the next request opened, hence the identity checks.
        socket.on("error", (err) => {
          if (this.socket === socket) this.fail(new TransportError("connection_lost", `connection to ${this.host}:${this.port} failed: ${err.message}`, { cause: err }));
        });
        socket.on("close", () => {
          if (this.socket === socket) this.fail(new TransportError("connection_closed", `connection to ${this.host}:${this.port} closed with ${this.inFlight} request(s) in flight`));
        });
        socket.on("data", (data: Buffer) => {
          if (this.socket === socket) this.receive(data);
        });
        this.socket = socket;
        if (token !== undefined) {
          // OP_AUTH is the connection's first frame; the requests waiting for this connection
          // are written right behind it. A refused token closes the connection on the server
          // (nothing after it is answered), so every request in flight gets the server's error.
          this.enqueue({ op: OP.AUTH, resolve: (reply) => { if (!reply.ok) this.fail(serverError(reply.body)); }, reject: () => undefined });
          socket.write(frame(OP.AUTH, CT_JSON, encodeBody({ token }, CT_JSON)));
        }
        resolve(socket);
      });
    });
    ready.catch(() => undefined);
    this.ready = ready;
    return ready;
  }

  /** Send one request; resolves with its reply (an error frame resolves with `ok` false). */
  async request(op: number, ct: number, payload: Uint8Array): Promise<Reply> {
    const ready = this.open();
    if (this.socket === undefined) await ready;
    return this.send(op, ct, payload);
  }

  /** Send `frames` (each `[op, ct, payload]`) in one write; resolves with their replies in order. */
  async pipeline(frames: readonly [number, number, Uint8Array][]): Promise<Reply[]> {
    const ready = this.open();
    if (this.socket === undefined) await ready;
    const socket = this.socket as Socket;
    const promises = frames.map(([op]) => new Promise<Reply>((resolve, reject) => this.enqueue({ op, resolve, reject })));
    socket.write(Buffer.concat(frames.map(([op, ct, payload]) => frame(op, ct, payload))));
    return Promise.all(promises);
  }

  private send(op: number, ct: number, payload: Uint8Array): Promise<Reply> {
    const socket = this.socket;
    if (socket === undefined) return Promise.reject(new TransportError("connection_closed", "not connected"));
    const data = frame(op, ct, payload);
    return new Promise<Reply>((resolve, reject) => {
      this.enqueue({ op, resolve, reject });
      socket.write(data);
    });
  }

  private enqueue(p: Pending): void {
    this.pending.push(p);
    const timeout = this.options.timeoutMs ?? 0;
    if (timeout > 0 && this.timer === undefined) this.arm(timeout);
  }

  private arm(timeout: number): void {
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.socket?.destroy();
      this.fail(new TransportError("timeout", `no reply from ${this.host}:${this.port} within ${timeout} ms`));
    }, timeout);
  }

  private receive(data: Buffer): void {
    const socket = this.socket;
    this.chunks.push(data);
    this.buffered += data.length;
    let buf = this.chunks.length === 1 ? (this.chunks[0] as Buffer) : Buffer.concat(this.chunks, this.buffered);
    let pos = 0;
    while (buf.length - pos >= 7) {
      const length = buf.readUInt32BE(pos);
      if (length < 3 || length > MAX_FRAME_BYTES + 3) {
        const why = length === HTTP_REPLY_LENGTH
          ? "the server answered in HTTP: this is an HTTP port; use the TCP port"
          : `reply frame declares length ${length}`;
        this.socket?.destroy();
        this.fail(new TransportError(length === HTTP_REPLY_LENGTH ? "http_reply" : "frame_error", why));
        return;
      }
      const end = pos + 4 + length;
      if (end > buf.length) break;
      const op = buf.readUInt16BE(pos + 4);
      const ct = buf.readUInt8(pos + 6);
      const payload = buf.subarray(pos + 7, end);
      pos = end;
      const waiting = this.pending[this.head];
      if (waiting === undefined) {
        this.socket?.destroy();
        this.fail(new TransportError("unexpected_frame", `an unsolicited reply frame (op 0x${op.toString(16)})`));
        return;
      }
      this.pending[this.head++] = undefined as unknown as Pending;
      if (this.head > 1024 && this.head * 2 > this.pending.length) {
        this.pending.splice(0, this.head);
        this.head = 0;
      }
      const body = decodePayload(payload, ct);
      waiting.resolve({ ok: op !== OP.ERROR && op === (REPLY_OP[waiting.op] ?? op), body });
      if (this.socket !== socket) return; // the reply failed the connection (a refused token)
    }
    buf = buf.subarray(pos);
    this.chunks = buf.length ? [buf] : [];
    this.buffered = buf.length;
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
      if (this.inFlight > 0) this.arm(this.options.timeoutMs ?? 0);
    }
  }

  /** Reject everything in flight and forget the connection (the next request reconnects). */
  private fail(err: Error): void {
    const waiting = this.pending.slice(this.head);
    this.pending.length = 0;
    this.head = 0;
    this.chunks = [];
    this.buffered = 0;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const socket = this.socket;
    this.socket = undefined;
    this.ready = undefined;
    socket?.destroy();
    for (const p of waiting) p.reject(err);
  }

  close(): void {
    this.fail(new TransportError("closed", "the client was closed"));
  }
}

/**
 * The HTTP client: JSON bodies on the routes of beava 0.0.6 (spec/wire.md), over
 * `node:http` / `node:https` with a keep-alive agent (`https` takes the CA of a private
 * server's certificate, which the global `fetch` cannot be given).
 */
import { Agent as HttpAgent, request as httpRequest } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { TransportError } from "./errors.js";
import { jsonText } from "./json.js";
import type { Reply } from "./tcp.js";

export interface HttpOptions {
  tls?: boolean;
  ca?: string | Buffer;
  token?: string;
  timeoutMs?: number;
}

export class HttpConnection {
  private readonly agent: HttpAgent;

  constructor(readonly host: string, readonly port: number, private readonly options: HttpOptions = {}) {
    this.agent = options.tls
      ? new HttpsAgent({ keepAlive: true, ...(options.ca ? { ca: options.ca } : {}) })
      : new HttpAgent({ keepAlive: true });
  }

  /** One request; resolves with the decoded JSON reply (`ok` false for a status other than 200). */
  request(method: "GET" | "POST", path: string, body?: unknown): Promise<Reply> {
    const data = body === undefined ? undefined : Buffer.from(jsonText(body));
    const headers: Record<string, string> = { accept: "application/json" };
    if (data !== undefined) {
      headers["content-type"] = "application/json";
      headers["content-length"] = String(data.length);
    }
    if (this.options.token !== undefined) headers["authorization"] = `Bearer ${this.options.token}`;
    const send = this.options.tls ? httpsRequest : httpRequest;
    return new Promise<Reply>((resolve, reject) => {
      const req = send({ host: this.host, port: this.port, method, path, headers, agent: this.agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", (err) => reject(new TransportError("connection_lost", err.message, { cause: err })));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          let parsed: unknown;
          try {
            parsed = text ? JSON.parse(text) : {};
          } catch {
            parsed = { error: { code: "unparseable_reply", message: text.slice(0, 200) } };
          }
          resolve({ ok: res.statusCode === 200, body: parsed });
        });
      });
      const timeout = this.options.timeoutMs ?? 0;
      if (timeout > 0) {
        req.setTimeout(timeout, () => req.destroy(new TransportError("timeout", `no reply from ${this.host}:${this.port} within ${timeout} ms`)));
      }
      req.on("error", (err) => reject(err instanceof TransportError ? err
        : new TransportError("connection_failed", `${method} ${path} to ${this.host}:${this.port}: ${err.message}`, { cause: err })));
      req.end(data);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

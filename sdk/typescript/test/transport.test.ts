/**
 * Transport: requests really in flight when the connection is lost (a server that reads and
 * never answers), TLS (`tcps://`, `https://`) with a CA made by the test, and tokens (the
 * right one works, a wrong one or a missing scope is the server's typed error).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server as NetServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, test } from "node:test";
import * as bv from "../src/index.js";
import { PYTHON, REPO, type Server, startServer } from "./server.js";

const Ping = bv.event("Ping", { host: "str", rtt: "f64" });
const Rtt = bv.table("Rtt", { key: "host" }, Ping.groupBy("host").agg({ n: bv.count(), worst: bv.max("rtt") }));

/**
 * A framed-TCP server that counts the frames it reads and answers none of them on its first
 * connection; on later ones it answers PING (op 0) as beava does, so a reconnect shows.
 */
class SilentServer {
  readonly connections: Socket[] = [];
  framesRead = 0;
  private readonly server: NetServer;

  constructor() {
    this.server = createServer((socket) => {
      const first = this.connections.length === 0;
      this.connections.push(socket);
      let buf = Buffer.alloc(0);
      socket.on("error", () => undefined);
      socket.on("data", (data: Buffer) => {
        buf = Buffer.concat([buf, data]);
        while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32BE(0)) {
          const op = buf.readUInt16BE(4);
          buf = buf.subarray(4 + buf.readUInt32BE(0));
          if (first) {
            this.framesRead += 1;
          } else if (op === 0) {
            const body = Buffer.from(JSON.stringify({ pong: true, registry_version: 7 }));
            const head = Buffer.alloc(7);
            head.writeUInt32BE(body.length + 3, 0);
            head.writeUInt16BE(0, 4);
            head.writeUInt8(1, 6);
            socket.write(Buffer.concat([head, body]));
          }
        }
      });
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((ok) => this.server.listen(0, "127.0.0.1", ok));
    const addr = this.server.address();
    if (addr === null || typeof addr === "string") throw new Error("no TCP address");
    return `tcp://127.0.0.1:${addr.port}`;
  }

  async until(framesRead: number): Promise<void> {
    const deadline = Date.now() + 20_000;
    while (this.framesRead < framesRead) {
      if (Date.now() > deadline) throw new Error(`the server read ${this.framesRead} of ${framesRead} frames within 20 s`);
      await sleep(5);
    }
  }

  close(): Promise<void> {
    for (const socket of this.connections) socket.destroy();
    return new Promise<void>((ok) => this.server.close(() => ok()));
  }
}

test("a lost connection rejects every request in flight with a TransportError; the next call reconnects", async () => {
  const silent = new SilentServer();
  const app = new bv.App(await silent.listen(), { timeoutMs: 0 });
  try {
    const pushes = Array.from({ length: 40 }, (_, i) => app.push("Ping", { host: `h${i}`, rtt: i }));
    const many = app.pushMany("Ping", Array.from({ length: 30 }, (_, i) => ({ host: "h", rtt: i })), { chunkSize: 10 });
    const read = app.get("Rtt", "h1");
    await silent.until(40 + 3 + 1); // every request was written and read by the server: all in flight
    silent.connections[0]?.destroy();
    const results = await Promise.allSettled([...pushes, many, read]);
    for (const result of results) {
      assert.equal(result.status, "rejected");
      const err = (result as PromiseRejectedResult).reason as unknown;
      assert.ok(err instanceof bv.TransportError, String(err));
      assert.equal(err.code, "connection_closed");
      assert.match(err.message, /closed with 44 request\(s\) in flight/);
    }
    assert.deepEqual(await app.ping(), { pong: true, registry_version: 7 });
    assert.equal(silent.connections.length, 2);
  } finally {
    app.close();
    await silent.close();
  }
});

test("a reply that does not come within timeoutMs rejects every request in flight; the next call reconnects", async () => {
  const silent = new SilentServer();
  const app = new bv.App(await silent.listen(), { timeoutMs: 300 });
  try {
    const results = await Promise.allSettled([app.ping(), app.get("Rtt", "h1")]);
    for (const result of results) {
      const err = (result as PromiseRejectedResult).reason as unknown;
      assert.ok(err instanceof bv.TransportError && err.code === "timeout", String(err));
    }
    assert.equal(silent.framesRead, 2);
    assert.equal((await app.ping())["registry_version"], 7);
    assert.equal(silent.connections.length, 2);
  } finally {
    app.close();
    await silent.close();
  }
});

const ADMIN = "ts-admin-token-000000001";
const READER = "ts-read-token-0000000002";
const TOKENS = { BEAVA_AUTH_TOKENS: `${ADMIN}:admin;${READER}:read` };

async function roundTrip(app: bv.App): Promise<void> {
  await app.reset();
  await app.register(Ping, Rtt);
  await app.push(Ping, { host: "a", rtt: 12.5 });
  await app.pushMany(Ping, [{ host: "a", rtt: 30 }, { host: "b", rtt: 1 }]);
  assert.deepEqual(await app.get(Rtt, "a"), { n: 2, worst: 30 });
}

describe("TLS with a CA made by the test", () => {
  let server: Server;
  let dir: string;
  let ca: Buffer;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "beava-ts-pki-"));
    execFileSync(PYTHON, ["-P", resolve(REPO, "sdk", "typescript", "scripts", "make_test_pki.py"), dir]);
    ca = readFileSync(join(dir, "ca.pem"));
    server = await startServer(["--tls-cert", join(dir, "cert.pem"), "--tls-key", join(dir, "key.pem")], TOKENS);
  });
  after(async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  for (const scheme of ["tcps", "https"] as const) {
    test(`${scheme}://: register, push and read with the CA and a token`, async () => {
      const url = scheme === "tcps" ? server.tcp.replace("tcp://", "tcps://") : server.http.replace("http://", "https://");
      const app = new bv.App(url, { ca, token: ADMIN });
      try {
        await roundTrip(app);
      } finally {
        app.close();
      }
    });

    test(`${scheme}://: a server certificate the client does not trust is a TransportError`, async () => {
      const url = scheme === "tcps" ? server.tcp.replace("tcp://", "tcps://") : server.http.replace("http://", "https://");
      const app = new bv.App(url, { token: ADMIN });
      try {
        const err = await app.ping().catch((e: unknown) => e);
        assert.ok(err instanceof bv.TransportError, String(err));
        assert.equal(err.code, "connection_failed");
        assert.match(err.message, /certificate/);
      } finally {
        app.close();
      }
    });
  }
});

describe("a token-protected server", () => {
  let server: Server;
  before(async () => { server = await startServer([], TOKENS); });
  after(async () => { await server.stop(); });

  for (const via of ["tcp", "http"] as const) {
    test(`${via}: the right token works; a wrong one is the server's unauthenticated error`, async () => {
      const url = via === "tcp" ? server.tcp : server.http;
      const admin = new bv.App(url, { token: ADMIN });
      try {
        await roundTrip(admin);
      } finally {
        admin.close();
      }
      const wrong = new bv.App(url, { token: "not-a-token-000000000000" });
      try {
        // Several requests ride behind the refused OP_AUTH on framed TCP: each gets the error.
        const results = await Promise.allSettled([wrong.get(Rtt, "a"), wrong.push(Ping, { host: "a", rtt: 1 })]);
        for (const result of results) {
          const err = (result as PromiseRejectedResult).reason as unknown;
          assert.ok(err instanceof bv.RegistrationError, String(err));
          assert.equal(err.code, "unauthenticated");
        }
      } finally {
        wrong.close();
      }
      const reader = new bv.App(url, { token: READER });
      try {
        assert.deepEqual(await reader.get(Rtt, "a"), { n: 2, worst: 30 });
        const err = await reader.push(Ping, { host: "a", rtt: 1 }).catch((e: unknown) => e);
        assert.ok(err instanceof bv.RegistrationError, String(err));
        assert.equal(err.code, "forbidden");
      } finally {
        reader.close();
      }
    });
  }
});

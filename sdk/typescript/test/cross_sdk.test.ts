/**
 * Cross-SDK: a pipeline registered from TypeScript, events pushed from TypeScript over
 * framed TCP and over HTTP (test clock pinned), rows read from Python, equal the rows of a
 * Python-only run of the same pipeline and events on another server.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { after, before, test } from "node:test";
import * as bv from "../src/index.js";
import { PYTHON, type Server, startServer } from "./server.js";

const T0 = Date.UTC(2026, 10, 1, 12);
const EVENTS = [
  { user_id: "u1", merchant: "cafe", amount: 4.5, status: "ok" },
  { user_id: "u1", merchant: "fuel", amount: 60.0, status: "declined" },
  { user_id: "u2", merchant: "cafe", amount: 700.25, status: "ok" },
  { user_id: "u1", merchant: "cafe", amount: 12.0, status: "declined" },
  { user_id: "u2", merchant: "book", amount: 9.99, status: "ok" },
  { user_id: "u3", merchant: "fuel", amount: 31.0, status: "ok" },
];
const KEYS = ["u1", "u2", "u3", "nobody"];

// The Python-only run: the same pipeline with the Python SDK, the same events and clock.
const PYTHON_RUN = `
import json, sys
import beava as bv

@bv.event
class Txn(bv.Event):
    user_id: str
    merchant: str
    amount: float
    status: str

@bv.table(key="user_id")
def UserRisk(txn: Txn) -> bv.Table:
    return txn.with_columns(big=bv.col("amount") > 500).group_by("user_id").agg(
        spend_1h=bv.sum("amount", window="1h"),
        txns=bv.count(),
        big_txns=bv.count(where=bv.col("big")),
        declines_in_a_row=bv.streak(where=bv.col("status") == "declined"),
        merchants=bv.n_unique("merchant", window="24h"),
        top_merchant=bv.top_k("merchant", k=1, window="24h"),
        p50=bv.quantile("amount", q=0.5, window="24h"),
        last_amounts=bv.last_n("amount", n=3),
    )

url, t0, events, keys = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
with bv.App(url) as app:
    if events is not None:
        app.register(Txn, UserRisk)
        for i, body in enumerate(events):
            app.set_time(t0 + i * 60_000)
            app.push("Txn", body)
    app.set_time(t0 + 30 * 60_000)
    print(json.dumps([app.get("UserRisk", k) for k in keys], sort_keys=True))
`;

function python(url: string, events: unknown): unknown {
  return JSON.parse(execFileSync(PYTHON, ["-c", PYTHON_RUN, url, String(T0), JSON.stringify(events), JSON.stringify(KEYS)], { encoding: "utf8" }));
}

let ts: Server;
let py: Server;
before(async () => { [ts, py] = await Promise.all([startServer(), startServer()]); });
after(async () => { await Promise.all([ts.stop(), py.stop()]); });

test("TypeScript register + push (TCP and HTTP), Python read == Python-only run", async () => {
  const Txn = bv.event("Txn", { user_id: "str", merchant: "str", amount: "f64", status: "str" });
  const UserRisk = bv.table("UserRisk", { key: "user_id" }, Txn.withColumns({ big: bv.col("amount").gt(500) }).groupBy("user_id").agg({
    spend_1h: bv.sum("amount", { window: "1h" }),
    txns: bv.count(),
    big_txns: bv.count({ where: bv.col("big") }),
    declines_in_a_row: bv.streak({ where: bv.col("status").eq("declined") }),
    merchants: bv.n_unique("merchant", { window: "24h" }),
    top_merchant: bv.top_k("merchant", { k: 1, window: "24h" }),
    p50: bv.quantile("amount", { q: 0.5, window: "24h" }),
    last_amounts: bv.last_n("amount", { n: 3 }),
  }));
  const tcp = new bv.App(ts.tcp);
  const http = new bv.App(ts.http);
  try {
    await tcp.register(Txn, UserRisk);
    for (const [i, body] of EVENTS.entries()) {
      const app = i % 2 === 0 ? tcp : http;   // alternate the transports
      await app.setTime(T0 + i * 60_000);
      await app.push(Txn, body);
    }
  } finally {
    tcp.close();
    http.close();
  }
  const fromTs = python(ts.tcp, null);
  const pythonOnly = python(py.tcp, EVENTS);
  assert.deepEqual(fromTs, pythonOnly);
  assert.deepEqual((fromTs as Record<string, unknown>[])[0]?.["txns"], 3);
});

/** App against a real server: register, push, read over framed TCP (MessagePack, JSON) and HTTP; typed errors; reconnects. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import * as bv from "../src/index.js";
import { type Server, startServer } from "./server.js";

const Txn = bv.event("Txn", { user_id: "str", amount: "f64", note: bv.optional("str") });
const UserSpend = bv.table("UserSpend", { key: "user_id" }, Txn.groupBy("user_id").agg({
  spend_1h: bv.sum("amount", { window: "1h" }),
  txns: bv.count(),
}));

let server: Server;
before(async () => { server = await startServer(); });
after(async () => { await server.stop(); });

for (const [label, url, options] of [
  ["tcp msgpack", () => server.tcp, {}],
  ["tcp json", () => server.tcp, { contentType: "json" as const }],
  ["http", () => server.http, {}],
] as const) {
  test(`register, push, pushMany and read back (${label})`, async () => {
    const app = new bv.App(url(), options);
    try {
      await app.reset();
      await app.setTime(Date.UTC(2026, 10, 1, 12));
      const reply = await app.register(Txn, UserSpend);
      assert.equal(typeof reply["registry_version"], "number");
      const ack = await app.push(Txn, { user_id: "u1", amount: 12.5 });
      assert.equal(typeof ack.ack_lsn, "number");
      const many = await app.pushMany("Txn", [{ user_id: "u1", amount: 1 }, { user_id: "u2", amount: 2 }, { user_id: "u1", amount: "x" }], { chunkSize: 2 });
      assert.equal(many.acks, 2);
      assert.equal(many.errors.length, 1);
      assert.equal(many.errors[0]?.index, 2);
      const row = await app.get(UserSpend, "u1");
      assert.deepEqual(row, { spend_1h: 13.5, txns: 2 });
      const only = await app.get(UserSpend, "u1", { features: ["txns"] });
      assert.deepEqual(only, { txns: 2 });
      // @ts-expect-error a feature the table does not declare fails at compile time
      await assert.rejects(app.get(UserSpend, "u1", { features: ["txn"] }), bv.FeatureNotFoundError);
      assert.deepEqual(await app.batchGet([[UserSpend, "u2"], ["UserSpend", "nobody"]]), [{ spend_1h: 2, txns: 1 }, {}]);
      await app.advance({ hours: 2 });
      assert.equal((await app.get(UserSpend, "u1"))["spend_1h"], null);
      const registry = await app.describe();
      assert.equal(registry["node_count"], 2);
    } finally {
      app.close();
    }
  });
}

test("the server's actionable errors surface as typed errors", async () => {
  const app = new bv.App(server.tcp);
  try {
    await app.reset();
    await app.register(Txn, UserSpend);
    const unknownField = await app.push("Txn", { user_id: "u1", amount: 1, colour: "red" }).catch((e: unknown) => e);
    assert.ok(unknownField instanceof bv.PushError, String(unknownField));
    assert.equal(unknownField.field, "colour");
    const wrongType = await app.push("Txn", { user_id: "u1", amount: "12" }).catch((e: unknown) => e);
    assert.ok(wrongType instanceof bv.PushError);
    assert.equal(wrongType.code, "invalid_event");
    assert.equal(wrongType.field, "amount");
    const unknownTable = await app.get("UserSpnd", "u1").catch((e: unknown) => e);
    assert.ok(unknownTable instanceof bv.ReadError);
    assert.equal(unknownTable.code, "unknown_table");
    const badTable = {
      kind: "derivation", name: "Bad", output_kind: "table", upstreams: ["Txn"], table_primary_key: ["user_id"],
      ops: [{ op: "group_by", keys: ["user_id"], agg: { s: { op: "sum", params: { field: "nope" } } } }],
    };
    const bad = await app.register(Txn, UserSpend, badTable).catch((e: unknown) => e);
    assert.ok(bad instanceof bv.RegistrationError);
    assert.equal(bad.code, "aggregation_unknown_field");
    assert.match(bad.path, /^Bad\.ops\[0\]/);
  } finally {
    app.close();
  }
});

test("DSL validation messages match the Python SDK's", () => {
  assert.throws(() => bv.quantile("amount", { q: 1.5 }), { message: "bv.quantile(): q=1.5 is out of range (0, 1)" });
  assert.throws(() => bv.top_k("merchant", { k: 0 }), { message: "bv.top_k(): k=0 is out of range [1, 1024]" });
  assert.throws(() => bv.sum("amount", { window: "0m" }), { message: "invalid window '0m'; expected <n>(ms|s|m|h|d) or 'forever' with n >= 1" });
  assert.throws(() => bv.table("T", { key: "user_id" }, Txn.groupBy("user_id").agg({ s: bv.sum("amont") })),
    (e: unknown) => e instanceof bv.DescriptorError && e.code === "aggregation_unknown_field" &&
      e.path === "T.ops[0].agg.s.params.field" && e.message.includes("did you mean 'amount'?"));
  assert.equal(bv.col("x").gt(bv.float(100)).toExprString(), "(x > 100.0)");
  assert.equal(bv.lit(1e-7).toExprString(), "1.0e-07");
  assert.equal(bv.col("x").neg().toExprString(), "(-1 * x)");
});

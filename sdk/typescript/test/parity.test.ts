/** The TypeScript compile output, as the SDK writes it, equals the Python SDK's JSON text (keys sorted, floats kept). */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { test } from "node:test";
import * as bv from "../src/index.js";
import { PIPELINES } from "./pipelines.js";
import { canonical, PYTHON, REPO } from "./server.js";

const expected = JSON.parse(execFileSync(PYTHON, [`${REPO}/sdk/typescript/scripts/python_payloads.py`], {
  cwd: REPO, encoding: "utf8", maxBuffer: 64 << 20,
})) as Record<string, string>;

test("every pipeline of the Python side has its TypeScript twin", () => {
  assert.deepEqual(Object.keys(PIPELINES).sort(), Object.keys(expected).sort());
});

test("a float parameter is written with its fraction, as Python writes a float", () => {
  const T = bv.event("T", { u: "str", a: "f64" });
  const S = bv.table("S", { key: "u" }, T.groupBy("u").agg({ o: bv.outlier_count("a", { window: "forever", sigma: 3 }) }));
  const text = bv.jsonText(bv.compile([T, S]));
  assert.match(text, /"sigma":3\.0[,}]/);
  assert.deepEqual([1e-7, 0.0001, 2.5, 1e16, 1.5e-5, -0].map((x) => bv.jsonText(new bv.F64(x))),
    ["1e-07", "0.0001", "2.5", "1e+16", "1.5e-05", "-0.0"]);
  assert.equal(bv.jsonText({ b: [1, 0.1, null], a: "x" }, { sortKeys: true }), '{"a":"x","b":[1,0.1,null]}');
});

for (const [name, build] of Object.entries(PIPELINES)) {
  test(`compile parity: ${name}`, () => {
    assert.equal(canonical(bv.compile(build())), expected[name]);
  });
}

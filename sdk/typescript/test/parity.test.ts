/** The TypeScript compile output equals the Python SDK's, byte for byte after canonical JSON. */
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

for (const [name, build] of Object.entries(PIPELINES)) {
  test(`compile parity: ${name}`, () => {
    assert.equal(canonical(bv.compile(build())), expected[name]);
  });
}

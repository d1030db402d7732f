/**
 * The shared conformance vectors (tests/conformance/vectors) replayed through `App`: every
 * scenario whose steps the SDK can send is run against a live test-mode server (over HTTP,
 * framed TCP with JSON and with MessagePack, as each step says) and its observations are
 * checked by the conformance runner's own comparison rules (scripts/conformance_check.py,
 * which says what an SDK observation cannot hold and how that is compared instead).
 *
 * Out of scope, each scenario listed as a skipped test with its reason: steps that put on
 * the wire what no SDK call produces (raw frames, raw bytes, raw HTTP requests, a register
 * body that is not a `{nodes: [...]}` object, a verbatim legacy read request, a push body
 * that is not an object, a float value such as `1.0` that must stay apart from the integer
 * `1`). A scenario with such a step is left out whole, since its later steps depend on what
 * that step did.
 */
import assert from "node:assert/strict";
import { type ChildProcessByStdio, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { createInterface } from "node:readline";
import type { Readable, Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, test } from "node:test";
import * as bv from "../src/index.js";
import { PYTHON, REPO, type Server, startServer } from "./server.js";

type Step = Record<string, unknown> & { kind: string };
interface Scenario { name: string; steps: Step[]; hour_sensitive?: boolean }
interface Observation { ok: boolean; body: unknown }

const VECTORS = resolve(REPO, "tests", "conformance", "vectors");
const RUN_ID = randomBytes(6).toString("hex");

function isObject(x: unknown): x is Record<string, unknown> {
  return x !== null && typeof x === "object" && !Array.isArray(x);
}

// Scenarios whose requests differ only in what a JavaScript number cannot hold.
const NUMBER_TYPED: Readonly<Record<string, string>> = {
  "ops.core.typed_values": "pushes 1 and 1.0 to one f64 field and expects two distinct values; a JavaScript number 1.0 is 1",
};

/** Why the SDK cannot send `step`, or undefined when it can. */
function outOfScope(step: Step): string | undefined {
  switch (step.kind) {
    case "tcp": return "a raw frame (an opcode, content type or payload bytes of the vector's choosing)";
    case "push_raw_tcp": return "raw bytes on a new connection (malformed or oversized frames)";
    case "http_raw": return "a raw HTTP request (routes, methods, headers and bodies the SDK never sends)";
    case "register":
      if ("raw_body" in step) return "a register body given as raw text";
      if ("headers" in step) return "a register request with headers of the vector's choosing";
      if (!isObject(step["payload"]) || !Array.isArray(step["payload"]["nodes"])) {
        return "a register payload without a nodes list (App.register sends {nodes: [...]})";
      }
      return undefined;
    case "get": return "request" in step ? "a verbatim read request (the legacy entity_id alias)" : undefined;
    case "push": return isObject(step["data"]) ? undefined : "a push body that is not an object (App refuses it before sending)";
    default: return undefined;
  }
}

/** `{{run}}` in every string replaced by this run's id, so dedupe keys never repeat across runs. */
function withRunId(x: unknown): unknown {
  if (typeof x === "string") return x.replaceAll("{{run}}", RUN_ID);
  if (Array.isArray(x)) return x.map(withRunId);
  if (isObject(x)) return Object.fromEntries(Object.entries(x).map(([k, v]) => [withRunId(k), withRunId(v)]));
  return x;
}

/** The runner's comparison rules, in one Python process fed a scenario per line. */
class Checker {
  private readonly proc: ChildProcessByStdio<Writable, Readable, null>;
  private readonly lines: AsyncIterator<string>;

  constructor() {
    this.proc = spawn(PYTHON, ["-P", resolve(REPO, "sdk", "typescript", "scripts", "conformance_check.py")],
      { stdio: ["pipe", "pipe", "inherit"] });
    this.lines = createInterface({ input: this.proc.stdout })[Symbol.asyncIterator]();
  }

  async check(steps: Step[], observations: (Observation | null)[], baseRv: number): Promise<string | null> {
    this.proc.stdin.write(JSON.stringify({ steps, observations, base_rv: baseRv }) + "\n");
    const line = await this.lines.next();
    if (line.done === true) throw new Error("the conformance checker exited");
    return (JSON.parse(line.value) as { diff: string | null }).diff;
  }

  close(): void {
    this.proc.stdin.end();
  }
}

/** The App of a step's transport: HTTP, or framed TCP with the step's content type. */
interface Apps { http: bv.App; json: bv.App; msgpack: bv.App }

function appFor(apps: Apps, step: Step): bv.App {
  if (step["via"] !== "tcp") return apps.http;
  return step["ct"] === "msgpack" ? apps.msgpack : apps.json;
}

async function run(app: bv.App, step: Step): Promise<unknown> {
  switch (step.kind) {
    case "register": return await app.register(step["payload"]);
    case "push": return await app.push(step["event"] as string, step["data"] as Record<string, unknown>);
    case "get": {
      const features = step["features"] as string[] | undefined;
      return await app.get(step["table"] as string, step["key"] as bv.Key, features === undefined ? {} : { features });
    }
    case "batch_get": return { results: await app.batchGet(step["requests"] as bv.BatchRequest[]) };
    case "ping": return await app.ping();
    case "reset": return await app.reset();
    default: throw new Error(`no SDK call for a ${step.kind} step`);
  }
}

/** A step's observation: the reply on success, the server's error body on a typed error. */
async function observe(apps: Apps, step: Step): Promise<Observation | null> {
  if (step.kind === "sleep_ms") {
    await sleep(Number(step["ms"]));
    return null;
  }
  try {
    return { ok: true, body: await run(appFor(apps, step), step) };
  } catch (err) {
    // Only the server's errors are observations; a transport or client-side error fails the test.
    if (err instanceof bv.RegistrationError) return { ok: false, body: err.details };
    throw err;
  }
}

/** Scenarios that bucket by UTC hour never straddle the top of an hour (as the runner does). */
async function clearOfHourBoundary(): Promise<void> {
  const left = 3_600_000 - (Date.now() % 3_600_000);
  if (left < 90_000) await sleep(left + 1000);
}

const scenarios: [file: string, scenario: Scenario][] = readdirSync(VECTORS).filter((f) => f.endsWith(".json")).sort()
  .flatMap((file) => (JSON.parse(readFileSync(resolve(VECTORS, file), "utf8")) as { scenarios: Scenario[] }).scenarios
    .map((sc): [string, Scenario] => [file, sc]));

let server: Server;
let checker: Checker;
before(async () => {
  server = await startServer();
  checker = new Checker();
});
after(async () => {
  checker.close();
  await server.stop();
});

test("every vector file is replayed, and most scenarios are in scope", () => {
  const files = new Set(scenarios.map(([file]) => file));
  assert.ok(files.size >= 17, `only ${files.size} vector files found in ${VECTORS}`);
  const inScope = scenarios.filter(([, sc]) => sc.steps.every((s) => outOfScope(s) === undefined));
  assert.ok(inScope.length >= 70, `only ${inScope.length} of ${scenarios.length} scenarios are in scope`);
});

for (const [file, scenario] of scenarios) {
  const excluded = NUMBER_TYPED[scenario.name] ?? scenario.steps.map(outOfScope).find((why) => why !== undefined);
  const name = `${file}: ${scenario.name}`;
  if (excluded !== undefined) {
    test(name, { skip: `out of scope: ${excluded}` }, () => undefined);
    continue;
  }
  test(name, async () => {
    if (scenario.hour_sensitive === true) await clearOfHourBoundary();
    const apps: Apps = {
      http: new bv.App(server.http),
      json: new bv.App(server.tcp, { contentType: "json" }),
      msgpack: new bv.App(server.tcp, { contentType: "msgpack" }),
    };
    try {
      const base = (await apps.http.reset())["registry_version"];
      const observations: (Observation | null)[] = [];
      for (const step of scenario.steps) observations.push(await observe(apps, withRunId(step) as Step));
      const diff = await checker.check(scenario.steps, observations, typeof base === "number" ? base : 0);
      assert.equal(diff, null);
    } finally {
      for (const app of Object.values(apps)) app.close();
    }
  });
}

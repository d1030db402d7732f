/**
 * `npm run bench -- tcp://HOST:PORT [events]`: the `small` workload (bench/workloads) from
 * one Node process: pipelined `pushMany` (chunks of 1000) and single `push` with up to 1024
 * in flight, then `push` one at a time; events/s and the p50/p99 of each request's latency.
 * The server is reset and the workload registered first (it must run in test mode).
 */
import { readFileSync } from "node:fs";
import * as bv from "../src/index.js";
import { REPO } from "../test/server.js";

const [url = "tcp://127.0.0.1:8081", countText = "200000"] = process.argv.slice(2);
const count = Number(countText);
const workload = JSON.parse(readFileSync(`${REPO}/bench/workloads/small.json`, "utf8")) as { register: { nodes: bv.Json[] } };
const rows = Array.from({ length: count }, (_, i) => ({ event_time: i, user_id: `u${i % 10_000}`, amount: (i % 1000) + 0.5 }));

function percentile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

function report(label: string, events: number, seconds: number, latencies: number[]): void {
  latencies.sort((a, b) => a - b);
  const ms = (x: number): string => x.toFixed(3);
  console.log(`${label}: ${Math.round(events / seconds).toLocaleString("en")} events/s, ` +
    `latency p50 ${ms(percentile(latencies, 0.5))} ms, p99 ${ms(percentile(latencies, 0.99))} ms (${latencies.length} requests)`);
}

async function timed<T>(latencies: number[], run: () => Promise<T>): Promise<T> {
  const start = performance.now();
  const out = await run();
  latencies.push(performance.now() - start);
  return out;
}

const app = new bv.App(url);
await app.reset();
await app.register({ nodes: workload.register.nodes });

{
  const latencies: number[] = [];
  const start = performance.now();
  const chunks = [];
  for (let i = 0; i < rows.length; i += 1000) chunks.push(rows.slice(i, i + 1000));
  const results = await Promise.all(chunks.map((c) => timed(latencies, () => app.pushMany("Txn", c))));
  const acks = results.reduce((n, r) => n + r.acks, 0);
  report("pushMany (chunks of 1000, all pipelined)", acks, (performance.now() - start) / 1000, latencies);
}
{
  const latencies: number[] = [];
  const start = performance.now();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < rows.length) {
      const row = rows[next++] as Record<string, unknown>;
      await timed(latencies, () => app.push("Txn", row));
    }
  };
  await Promise.all(Array.from({ length: 1024 }, worker));
  report("push (1024 in flight)", rows.length, (performance.now() - start) / 1000, latencies);
}
{
  const latencies: number[] = [];
  const n = Math.min(rows.length, 20_000);
  const start = performance.now();
  for (let i = 0; i < n; i++) await timed(latencies, () => app.push("Txn", rows[i] as Record<string, unknown>));
  report("push (one at a time)", n, (performance.now() - start) / 1000, latencies);
}
app.close();

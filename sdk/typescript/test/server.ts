/**
 * Test support: the repository's paths and a real beava server started by the test
 * (`python -P -m beava` from the venv of the README's test command, or `$BEAVA_PYTHON`),
 * on free 127.0.0.1 ports read from its start-up lines.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { jsonText } from "../src/json.js";

/** The repository root (this file is sdk/typescript/[dist/]test/server.{ts,js}). */
export const REPO = (() => {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(resolve(dir, "spec")) || !existsSync(resolve(dir, "sdk"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("repository root not found above the test files");
    dir = up;
  }
  return dir;
})();

export const PYTHON = process.env["BEAVA_PYTHON"] ?? resolve(REPO, ".venv", "bin", "python");

export interface Server {
  tcp: string;
  http: string;
  admin: string;
  proc: ChildProcess;
  stop(): Promise<void>;
}

/** Start a memory-only test-mode server (plus `args`); resolves once it is ready. */
export async function startServer(args: string[] = [], env: Record<string, string> = {}): Promise<Server> {
  const childEnv: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("BEAVA_")) childEnv[k] = v;
  const proc = spawn(PYTHON, [
    "-P", "-m", "beava", "--http-addr", "127.0.0.1:0", "--tcp-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
    "--memory-only", "--test-mode", ...args,
  ], { env: { ...childEnv, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  proc.stderr?.on("data", (d: Buffer) => { stderr = (stderr + d.toString()).slice(-4000); });
  const addrs: Record<string, string> = {};
  const lines = createInterface({ input: proc.stdout as NodeJS.ReadableStream });
  await new Promise<void>((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`beava did not start within 20 s: ${stderr}`)), 20_000);
    proc.on("exit", (code) => { clearTimeout(timer); fail(new Error(`beava exited with ${code}: ${stderr}`)); });
    lines.on("line", (line) => {
      let doc: Record<string, unknown>;
      try { doc = JSON.parse(line) as Record<string, unknown>; } catch { return; }
      const event = String(doc["kind"] ?? "");
      const found = /^server\.(http|tcp|admin)_bound$/.exec(event);
      if (found) addrs[found[1] as string] = String(doc["addr"]);
      if (event === "server.ready") { clearTimeout(timer); ok(); }
    });
  });
  proc.removeAllListeners("exit");
  return {
    tcp: `tcp://${addrs["tcp"]}`,
    http: `http://${addrs["http"]}`,
    admin: `http://${addrs["admin"]}`,
    proc,
    stop: () => new Promise<void>((ok) => {
      if (proc.exitCode !== null) return ok();
      proc.once("exit", () => ok());
      proc.kill("SIGTERM");
    }),
  };
}

/** `value` as the SDK writes it, keys sorted at every level (no spaces). */
export function canonical(value: unknown): string {
  return jsonText(value, { sortKeys: true });
}

/** The register payload compiler (spec/sdk.md §7): descriptors -> `{"nodes": [...]}`. */
import { RegistrationError } from "./errors.js";
import { cloneJson, type Json } from "./json.js";
import { EventSource, Stream, Table } from "./pipeline.js";

/** What `compile` and `App.register` take: event sources, named derived events, tables, node dicts. */
export type Descriptor = EventSource<never> | Stream<never> | Table<unknown> | Record<string, Json>;

export interface RegisterOptions {
  /** Replace the registry even when the change drops or alters existing state. */
  force?: boolean;
  /** Validate and report the plan without applying it. */
  dryRun?: boolean;
}

export interface RegisterPayload {
  nodes: Json[];
  force?: true;
  dry_run?: true;
}

function isNodeDict(obj: unknown): obj is Record<string, Json> {
  return obj !== null && typeof obj === "object" && Object.getPrototypeOf(obj) === Object.prototype;
}

/**
 * The body `App.register` sends: nodes in argument order, each root event source emitted
 * before its first dependent (added when not passed), each descriptor once; node dicts are
 * emitted unchanged. `force` / `dry_run` appear only when true.
 */
export function compile(descriptors: readonly unknown[], options: RegisterOptions = {}): RegisterPayload {
  descriptors.forEach((obj, i) => {
    if (obj instanceof Stream && !(obj instanceof EventSource) && !obj.isEvent) {
      throw new RegistrationError({
        code: "invalid_descriptor",
        path: `descriptors[${i}]`,
        message: "an unnamed chain cannot be registered; name it with event(\"Name\", chain) (or aggregate it in a table)",
      });
    }
    if (!(obj instanceof Stream || obj instanceof Table || isNodeDict(obj))) {
      throw new TypeError(`descriptors[${i}] is not a beava descriptor (an event, a table, or a node dict): ${String(obj)}`);
    }
  });
  const nodes: Json[] = [];
  const emitted = new Set<unknown>();
  const emitSource = (source: EventSource): void => {
    if (!emitted.has(source)) {
      emitted.add(source);
      nodes.push(source.node());
    }
  };
  for (const obj of descriptors) {
    if (isNodeDict(obj)) {
      nodes.push(obj);
    } else if (emitted.has(obj)) {
      continue;
    } else if (obj instanceof EventSource) {
      emitSource(obj);
    } else if (obj instanceof Table) {
      const node = obj.node();
      emitSource(obj.root);
      emitted.add(obj);
      nodes.push(node);
    } else if (obj instanceof Stream) {
      emitSource(obj.root);
      emitted.add(obj);
      nodes.push({
        kind: "derivation",
        name: obj.name as string,
        output_kind: "event",
        upstreams: [obj.root.name as string],
        ops: cloneJson([...obj.steps]) as Json,
        schema: { fields: { ...obj.columns }, optional_fields: [] },
      });
    }
  }
  const payload: RegisterPayload = { nodes };
  if (options.force) payload.force = true;
  if (options.dryRun) payload.dry_run = true;
  return payload;
}

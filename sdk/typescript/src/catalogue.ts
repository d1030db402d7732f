/**
 * The catalogue facts the DSL validates from: `catalogue.json`, generated from the Python
 * package (`python -m beava.dsl.catalogue_export --write`) and checked against it by the Python
 * tests, so the server, the Python SDK and this SDK read the same table.
 */
import catalogueJson from "./catalogue.json" with { type: "json" };

export type ParamKind = "string" | "duration" | "uint" | "number" | "numbers" | "strings";

export interface Bounds {
  lo: number;
  hi: number | null;
  lo_open: boolean;
  hi_open: boolean;
  code: string;
  text: string;
}

export interface ParamSpec {
  name: string;
  kind: ParamKind;
  default: unknown;
  required: boolean;
  bounds: Bounds | null;
  alias: string | null;
  max_items: number | null;
}

export type WindowMode = "windowed" | "ignored" | "lifetime_only" | "required" | "unsupported";
export type FieldUse = "none" | "unchecked" | "checked" | "required";

export interface OperatorSpec {
  name: string;
  family: string;
  params: ParamSpec[];
  field: FieldUse;
  window: WindowMode;
  output: string;
  wire_type: string | null;
}

export interface FunctionParam {
  name: string;
  positional: boolean;
  required: boolean;
  default: unknown;
}

export interface FunctionSpec {
  op: string;
  params: FunctionParam[];
}

export interface Catalogue {
  operators: OperatorSpec[];
  op_aliases: Record<string, string>;
  functions: Record<string, FunctionSpec>;
  client_bounds: Record<string, Bounds>;
  bloom: { max_hashes: number; max_bits: number; default_expected_n: number; default_target_fpr: number };
  durations: { forever: string; max_ms: string; units_ms: Record<string, number>; sdk_pattern: string };
  expressions: {
    identifier: string;
    keywords: string[];
    i64_min: string;
    i64_max: string;
    cast_targets: Record<string, string>;
  };
  event: { wire_types: string[]; options: string[]; forbidden_options: string[] };
}

export const CATALOGUE: Catalogue = catalogueJson as unknown as Catalogue;

const BY_NAME = new Map(CATALOGUE.operators.map((op) => [op.name, op]));

/** The canonical name of an op string (`ema` -> `ewma`); unknown names pass through. */
export function canonicalOp(name: string): string {
  return CATALOGUE.op_aliases[name] ?? name;
}

/** The operator an op string names (aliases included), or undefined. */
export function lookup(name: string): OperatorSpec | undefined {
  return BY_NAME.get(canonicalOp(name));
}

export function contains(b: Bounds, value: number): boolean {
  if (value < b.lo || (b.lo_open && value === b.lo)) return false;
  if (b.hi === null) return true;
  return value < b.hi || (!b.hi_open && value === b.hi);
}

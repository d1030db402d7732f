/**
 * Expressions: `col` / `lit` and the methods that build them (the Python SDK's operator
 * overloads: `col("amount").gt(100)` is `bv.col("amount") > 100`). Every node renders its
 * wire string once, at construction, exactly as the Python SDK renders it, and knows its
 * register-time type rules (spec/expressions.md §8) to type derived columns.
 *
 * JavaScript has one number type: an integral number is an i64 literal (`100`), any other
 * finite number an f64 (`0.5`); `float(100)` is the f64 literal `100.0`, and a bigint an i64
 * beyond 2^53.
 */
import { CATALOGUE } from "./catalogue.js";
import { ValueError } from "./errors.js";

const IDENTIFIER = new RegExp(CATALOGUE.expressions.identifier);
const KEYWORDS = new Set(CATALOGUE.expressions.keywords);
const I64_MIN = BigInt(CATALOGUE.expressions.i64_min);
const I64_MAX = BigInt(CATALOGUE.expressions.i64_max);
export const CAST_TARGETS: Readonly<Record<string, string>> = CATALOGUE.expressions.cast_targets;
export type CastTarget = "str" | "int" | "float" | "bool";

/** A value a literal may hold. */
export type LiteralValue = null | boolean | number | bigint | string | FloatLiteral;
/** An operand: an expression or a literal value. */
export type Operand = Expr | LiteralValue;

/** A number to be written as an f64 literal even when integral (`float(2)` is `2.0`). */
export class FloatLiteral {
  constructor(readonly value: number) {}
}

/** `float(2)`: the f64 literal `2.0` (an integral number alone is an i64). */
export function float(value: number): FloatLiteral {
  return new FloatLiteral(value);
}

/** Python's `repr(float)`: shortest round-trip digits, positional for exponents -4..15. */
export function pythonFloatText(x: number): string {
  if (Object.is(x, -0)) return "-0.0";
  if (x === 0) return "0.0";
  const sign = x < 0 ? "-" : "";
  const [mantissa = "", expText = "0"] = Math.abs(x).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const exp = Number(expText);
  if (exp >= -4 && exp < 16) {
    if (exp < 0) return `${sign}0.${"0".repeat(-exp - 1)}${digits}`;
    const whole = digits.padEnd(exp + 1, "0");
    const rest = digits.slice(exp + 1);
    return `${sign}${whole.slice(0, exp + 1)}.${rest || "0"}`;
  }
  const head = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : `${digits}`;
  const e = `${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
  return `${sign}${head}e${e}`;
}

interface Literal {
  text: string;
  type: string;
}

function literal(value: LiteralValue): Literal {
  if (value === null) return { text: "null", type: "null" };
  if (typeof value === "boolean") return { text: value ? "true" : "false", type: "bool" };
  if (typeof value === "bigint") {
    if (value < I64_MIN || value > I64_MAX) {
      throw new ValueError(`integer literal ${value} is outside the signed 64-bit range`);
    }
    return { text: value.toString(), type: "i64" };
  }
  if (typeof value === "string") {
    return { text: `'${value.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`, type: "str" };
  }
  const isFloat = value instanceof FloatLiteral;
  const x = isFloat ? value.value : value;
  if (typeof x !== "number") {
    throw new TypeError(`unsupported literal of type ${typeof x}; expected null, boolean, number, bigint or string`);
  }
  if (!Number.isFinite(x)) throw new ValueError(`float literal ${x} is not finite`);
  if (!isFloat && Number.isInteger(x)) {
    if (!Number.isSafeInteger(x)) {
      throw new ValueError(`integer literal ${x} is beyond 2^53; pass it as a bigint (${BigInt(x)}n)`);
    }
    return { text: String(x), type: "i64" };
  }
  let text = pythonFloatText(x);
  if (text.includes("e") && !text.includes(".")) {
    const [m, e] = text.split("e");
    text = `${m}.0e${e}`;
  }
  return { text, type: "f64" };
}

type Kind = "col" | "lit" | "arith" | "compare" | "logic" | "not" | "cast";
type Schema = Readonly<Record<string, string>>;

const NUMERIC = new Set(["i64", "f64"]);

function comparable(a: string, b: string): boolean {
  return a === b || a === "null" || b === "null" || (NUMERIC.has(a) && NUMERIC.has(b));
}

function arithType(op: string, a: string, b: string): string | undefined {
  if (a === "null" && b === "null") return "null";
  if (op === "/") {
    const ok = (t: string): boolean => NUMERIC.has(t) || t === "null";
    if (!ok(a) || !ok(b)) return undefined;
    if (a === "null") return b;
    if (b === "null") return a;
  } else {
    if (a === "null") return b;
    if (b === "null") return a;
    if (!NUMERIC.has(a) || !NUMERIC.has(b)) return undefined;
  }
  return a === "f64" || b === "f64" ? "f64" : "i64";
}

/** An immutable expression node; methods build new nodes. */
export class Expr {
  /** @internal */
  constructor(
    readonly text: string,
    private readonly kind: Kind,
    private readonly children: readonly Expr[] = [],
    private readonly detail = "",
  ) {}

  /** The wire form (fully parenthesised). */
  toExprString(): string {
    return this.text;
  }

  toString(): string {
    return this.text;
  }

  private binary(op: string, kind: Kind, other: Operand, reflected = false): Expr {
    const o = operand(other);
    const [l, r] = reflected ? [o, this] : [this, o];
    return new Expr(`(${l.text} ${op} ${r.text})`, kind, [l, r], op);
  }

  add(other: Operand): Expr { return this.binary("+", "arith", other); }
  sub(other: Operand): Expr { return this.binary("-", "arith", other); }
  mul(other: Operand): Expr { return this.binary("*", "arith", other); }
  div(other: Operand): Expr { return this.binary("/", "arith", other); }
  /** `(-1 * x)`, the form the Python SDK writes for `-x`. */
  neg(): Expr { return lit(-1).mul(this); }
  gt(other: Operand): Expr { return this.binary(">", "compare", other); }
  ge(other: Operand): Expr { return this.binary(">=", "compare", other); }
  lt(other: Operand): Expr { return this.binary("<", "compare", other); }
  le(other: Operand): Expr { return this.binary("<=", "compare", other); }
  eq(other: Operand): Expr { return this.binary("==", "compare", other); }
  ne(other: Operand): Expr { return this.binary("!=", "compare", other); }
  and(other: Operand): Expr { return this.binary("and", "logic", other); }
  or(other: Operand): Expr { return this.binary("or", "logic", other); }
  not(): Expr { return new Expr(`(not ${this.text})`, "not", [this]); }
  /** `(x == null)`: true when the value is null or absent. */
  isnull(): Expr { return this.eq(null); }
  /** `cast(x, T)`. */
  cast(target: CastTarget): Expr {
    const t = castTarget(target);
    return new Expr(`cast(${this.text}, ${t})`, "cast", [this], t);
  }

  /** The columns this expression reads, each once, in order of first appearance. */
  columns(): string[] {
    const seen = new Set<string>();
    const stack: Expr[] = [this];
    while (stack.length) {
      const node = stack.pop() as Expr;
      if (node.kind === "col") seen.add(node.text);
      else for (let i = node.children.length - 1; i >= 0; i--) stack.push(node.children[i] as Expr);
    }
    return [...seen];
  }

  /** The static type over `schema` (`str i64 f64 bool null`), or undefined when it does not type-check. */
  inferType(schema: Schema): string | undefined {
    const [a, b] = this.children;
    switch (this.kind) {
      case "col": return schema[this.text];
      case "lit": return this.detail;
      case "cast": return (a as Expr).inferType(schema) === undefined ? undefined : CAST_TARGETS[this.detail];
      case "not": {
        const inner = (a as Expr).inferType(schema);
        return inner === "bool" || inner === "null" ? "bool" : undefined;
      }
      default: {
        const left = (a as Expr).inferType(schema);
        const right = (b as Expr).inferType(schema);
        if (left === undefined || right === undefined) return undefined;
        if (this.kind === "compare") return comparable(left, right) ? "bool" : undefined;
        if (this.kind === "logic") {
          const ok = (t: string): boolean => t === "bool" || t === "null";
          return ok(left) && ok(right) ? "bool" : undefined;
        }
        return arithType(this.detail, left, right);
      }
    }
  }
}

export function castTarget(target: unknown): string {
  if (typeof target === "string" && Object.hasOwn(CAST_TARGETS, target)) return target;
  throw new ValueError(`invalid cast target ${JSON.stringify(target)}; expected one of 'str', 'int', 'float', 'bool'`);
}

/** A reference to column `name` (identifier segments joined by dots, such as `geo.lat`). */
export function col(name: string): Expr {
  if (typeof name !== "string") throw new TypeError(`col() takes a column name string, got ${typeof name}`);
  if (!IDENTIFIER.test(name)) {
    throw new ValueError(
      `invalid column name '${name}': expected identifier segments [A-Za-z_][A-Za-z0-9_]* joined by single dots`,
    );
  }
  if (KEYWORDS.has(name)) throw new ValueError(`invalid column name '${name}': it is a keyword of expressions`);
  return new Expr(name, "col");
}

/** An explicit literal (`null` renders as `null`). */
export function lit(value: LiteralValue): Expr {
  const l = literal(value);
  return new Expr(l.text, "lit", [], l.type);
}

export function operand(value: Operand): Expr {
  return value instanceof Expr ? value : lit(value);
}

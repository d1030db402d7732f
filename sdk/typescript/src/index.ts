/**
 * beava's TypeScript SDK: the pipeline DSL (compiling to the same register payload as the
 * Python SDK) and the framed-TCP and HTTP clients.
 *
 *     import * as bv from "beava";
 *     const Txn = bv.event("Txn", { user_id: "str", amount: "f64" });
 */
export * from "./operators.js";
export { var_ as var } from "./operators.js";
export { col, lit, float, Expr, FloatLiteral, type CastTarget, type LiteralValue, type Operand } from "./expressions.js";
export {
  event, table, optional, Stream, EventSource, GroupBy, Aggregation, Table,
  type WireType, type FieldSpec, type Columns, type EventOptions, type EventFields, type RowOf, type TsOf,
} from "./pipeline.js";
export { compile, type Descriptor, type RegisterOptions, type RegisterPayload } from "./compile.js";
export {
  ValueError, RegistrationError, DescriptorError, PushError, ReadError, FeatureNotFoundError, TransportError,
  type Json,
} from "./errors.js";
export { CATALOGUE } from "./catalogue.js";
export { F64, jsonText } from "./json.js";
export { App, encodeKey, type AppOptions, type Key, type Row, type BatchRequest, type PushAck, type PushManyResult } from "./app.js";

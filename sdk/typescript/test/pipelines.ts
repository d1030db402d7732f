/**
 * The repository's pipelines written with the TypeScript DSL: examples/*.py, the pipeline
 * samples of docs/*.md, the operator reference's table (docs/hooks/reference.py) and
 * bench/workloads/*.json. parity.test.ts compiles each and compares it with the Python
 * SDK's payload (scripts/python_payloads.py); keys are the same on both sides.
 */
import { readFileSync } from "node:fs";
import * as bv from "../src/index.js";
import { REPO } from "./server.js";

const declined = bv.col("status").eq("declined");

function agentRuntimeGuardrails(): unknown[] {
  const ToolCall = bv.event("ToolCall", { agent_id: "str", tool: "str", tokens: "i64", cost_usd: "f64", failed: "bool" });
  const AgentGuard = bv.table("AgentGuard", { key: "agent_id" }, ToolCall.groupBy("agent_id").agg({
    calls_1m: bv.count({ window: "1m" }),
    spend_1h: bv.sum("cost_usd", { window: "1h" }),
    failure_streak: bv.streak({ where: bv.col("failed") }),
    failure_rate_10m: bv.ratio({ window: "10m", where: bv.col("failed") }),
    tools_10m: bv.n_unique("tool", { window: "10m" }),
    tokens_max_1h: bv.max("tokens", { window: "1h" }),
  }));
  return [ToolCall, AgentGuard];
}

function marketplaceReranking(): unknown[] {
  const ListingView = bv.event("ListingView", { listing_id: "str", shopper_id: "str", category: "str", price: "f64" });
  const Purchase = bv.event("Purchase", { listing_id: "str", shopper_id: "str", amount: "f64" });
  const ListingDemand = bv.table("ListingDemand", { key: "listing_id" }, ListingView.groupBy("listing_id").agg({
    views_1h: bv.count({ window: "1h" }),
    viewers_1h: bv.n_unique("shopper_id", { window: "1h" }),
  }));
  const ListingSales = bv.table("ListingSales", { key: "listing_id" }, Purchase.groupBy("listing_id").agg({
    sales_1h: bv.count({ window: "1h" }),
    buyers_1h: bv.n_unique("shopper_id", { window: "1h" }),
  }));
  const ShopperTaste = bv.table("ShopperTaste", { key: "shopper_id" }, ListingView.groupBy("shopper_id").agg({
    typical_price: bv.quantile("price", { q: 0.5, window: "1d" }),
    favourite_category: bv.top_k("category", { k: 1, window: "1d" }),
  }));
  return [ListingView, Purchase, ListingDemand, ListingSales, ShopperTaste];
}

function saasGrowthRescue(): unknown[] {
  const Login = bv.event("Login", { account_id: "str", user_id: "str" });
  const FeatureUsed = bv.event("FeatureUsed", { account_id: "str", user_id: "str", feature: "str" });
  const Ticket = bv.event("Ticket", { account_id: "str", severity: "str", minutes_open: "i64" });
  const AccountActivity = bv.table("AccountActivity", { key: "account_id" }, Login.groupBy("account_id").agg({
    active_users_7d: bv.n_unique("user_id", { window: "7d" }),
    logins_7d: bv.count({ window: "7d" }),
    ms_since_login: bv.time_since(),
  }));
  const AccountAdoption = bv.table("AccountAdoption", { key: "account_id" }, FeatureUsed.groupBy("account_id").agg({
    features_7d: bv.n_unique("feature", { window: "7d" }),
    top_feature: bv.top_k("feature", { k: 1, window: "7d" }),
  }));
  const UrgentTicket = bv.event("UrgentTicket", Ticket.filter(bv.col("severity").eq("high")).withColumns({
    hours_open: bv.col("minutes_open").cast("float").div(60),
  }));
  const AccountSupport = bv.table("AccountSupport", { key: "account_id" }, UrgentTicket.groupBy("account_id").agg({
    urgent_tickets_7d: bv.count({ window: "7d" }),
    worst_hours_open: bv.max("hours_open", { window: "7d" }),
  }));
  return [Login, FeatureUsed, Ticket, AccountActivity, AccountAdoption, UrgentTicket, AccountSupport];
}

/** The `Txn` / `UserSpend` pair most pages start with. */
function userSpend(features: Record<string, bv.Feature>, fields: Record<string, bv.WireType> = {}): unknown[] {
  const Txn = bv.event("Txn", { user_id: "str", ...fields, amount: "f64" });
  return [Txn, bv.table("UserSpend", { key: "user_id" }, Txn.groupBy("user_id").agg(features))];
}

function concepts(): unknown[] {
  const Txn = bv.event("Txn", { user_id: "str", merchant: "str", amount: "f64", coupon: bv.optional("str") });
  const UserSpend = bv.table("UserSpend", { key: "user_id" }, Txn.groupBy("user_id").agg({
    spend_24h: bv.sum("amount", { window: "24h" }),
    big_txns: bv.count({ where: bv.col("amount").gt(500) }),
  }));
  const UserMerchant = bv.table("UserMerchant", { key: ["user_id", "merchant"] }, Txn.groupBy("user_id", "merchant").agg({
    visits_7d: bv.count({ window: "7d" }),
  }));
  const Login = bv.event("Login", { user_id: "str", country: "str" });
  const UserLogins = bv.table("UserLogins", { key: "user_id" }, Login.groupBy("user_id").agg({
    countries_7d: bv.n_unique("country", { window: "7d" }),
  }));
  return [Txn, UserSpend, UserMerchant, Login, UserLogins];
}

function sdkPage(): unknown[] {
  const Txn = bv.event("Txn", { user_id: "str", merchant: "str", amount: "f64", status: "str" });
  const Declined = bv.event("Declined", Txn.filter(bv.col("status").eq("declined")));
  const UserRisk = bv.table("UserRisk", { key: "user_id" }, Txn.withColumns({ big: bv.col("amount").gt(500) })
    .groupBy("user_id")
    .agg({
      spend_1h: bv.sum("amount", { window: "1h" }),
      big_txns_24h: bv.count({ window: "24h", where: bv.col("big") }),
      declines_in_a_row: bv.streak({ where: bv.col("status").eq("declined") }),
    }));
  const UserDeclines = bv.table("UserDeclines", { key: "user_id" }, Declined.groupBy("user_id").agg({
    declines_7d: bv.count({ window: "7d" }),
  }));
  const FraudTxn = bv.event("Txn", {
    txn_id: "str", user_id: "str", card_id: "str", merchant: "str", amount: "f64", country: "str", is_fraud: "bool",
  });
  const UserFraud = bv.table("UserFraud", { key: "user_id" }, FraudTxn.groupBy("user_id").agg({
    txns: bv.count(), spend: bv.sum("amount"),
  }));
  return [Txn, Declined, UserRisk, UserDeclines, FraudTxn, UserFraud];
}

/** docs/hooks/reference.py: one feature per operator over its example event. */
function operatorReference(): unknown[] {
  const Txn = bv.event("Txn", {
    user_id: "str", amount: "f64", merchant: "str", country: "str", status: "str", lat: "f64", lon: "f64",
  });
  const forever = { window: "forever" };
  const geo = { lat: "lat", lon: "lon" };
  const Reference = bv.table("Reference", { key: "user_id" }, Txn.groupBy("user_id").agg({
    txns_1h: bv.count({ window: "1h" }),
    spend_24h: bv.sum("amount", { window: "24h" }),
    avg_amount_7d: bv.mean("amount", { window: "7d" }),
    min_amount_1h: bv.min("amount", { window: "1h" }),
    max_amount_1h: bv.max("amount", { window: "1h" }),
    amount_var_24h: bv.var("amount", { window: "24h" }),
    amount_std_24h: bv.std("amount", { window: "24h" }),
    declined_share_1h: bv.ratio({ window: "1h", where: declined }),
    merchants_24h: bv.n_unique("merchant", { window: "24h" }),
    p90_amount_7d: bv.quantile("amount", { q: 0.9, window: "7d" }),
    top_merchants_7d: bv.top_k("merchant", { k: 3, window: "7d" }),
    merchant_seen_before: bv.bloom_member("merchant", { expected_n: 10_000 }),
    merchant_entropy_24h: bv.entropy("merchant", { window: "24h" }),
    first_country: bv.first("country"),
    last_country: bv.last("country"),
    first_3_merchants: bv.first_n("merchant", { n: 3 }),
    last_5_amounts: bv.last_n("amount", { n: 5 }),
    previous_amount: bv.lag("amount", { n: 1 }),
    first_txn_at: bv.first_seen(),
    last_txn_at: bv.last_seen(),
    account_age_ms: bv.age(),
    ever_declined: bv.has_seen({ where: declined }),
    ms_since_last_txn: bv.time_since(),
    ms_since_5th_last: bv.time_since_last_n({ n: 5 }),
    declines_in_a_row: bv.streak({ where: declined }),
    most_declines_in_a_row: bv.max_streak({ where: declined }),
    txns_since_decline: bv.negative_streak({ where: declined }),
    active_last_hour: bv.first_seen_in_window({ window: "1h" }),
    amount_ewma: bv.ewma("amount", { half_life: "1h" }),
    amount_ewvar: bv.ewvar("amount", { half_life: "1h" }),
    amount_ew_z: bv.ew_zscore("amount", { half_life: "1d" }),
    spend_decayed: bv.decayed_sum("amount", { half_life: "6h" }),
    txns_decayed: bv.decayed_count({ half_life: "6h" }),
    amount_twa: bv.twa("amount", forever),
    amount_rate: bv.rate_of_change("amount", forever),
    mean_gap_ms: bv.inter_arrival_stats(forever),
    max_txns_per_minute: bv.burst_count({ ...forever, sub_window: "1m" }),
    amount_delta: bv.delta_from_prev("amount"),
    amount_trend: bv.trend("amount", forever),
    amount_residual: bv.trend_residual("amount", forever),
    amount_outliers: bv.outlier_count("amount", { ...forever, sigma: 3.0 }),
    country_changes: bv.value_change_count("country", forever),
    amount_z: bv.z_score("amount", { baseline_window: "forever" }),
    amount_buckets: bv.histogram("amount", { buckets: [10, 100, 1000] }),
    txns_by_hour: bv.hour_of_day_histogram(),
    txns_by_weekday_hour: bv.dow_hour_histogram(),
    amount_vs_hour: bv.seasonal_deviation("amount"),
    status_mix: bv.event_type_mix("status", { categories: ["ok", "declined"] }),
    recent_merchants: bv.most_recent_n("merchant", { n: 5 }),
    sampled_amounts: bv.reservoir_sample("amount", { samples: 20 }),
    max_kmh: bv.geo_velocity(geo),
    km_travelled: bv.geo_distance(geo),
    km_spread: bv.geo_spread(geo),
    km_from_home: bv.distance_from_home({ ...geo, samples: 50 }),
  }));
  return [Txn, Reference];
}

type Operator = (...args: never[]) => bv.Feature;

/**
 * A workload feature through its operator function (the rule of workload_feature in
 * scripts/python_payloads.py): `field` first, the other params the function takes as
 * options; when the function refuses them, the node dict `{op, ...params}`.
 */
function workloadFeature(entry: { op: string; params: Record<string, bv.Json> }): bv.Feature | ({ op: string } & Record<string, bv.Json>) {
  const { op, params } = entry;
  const signature = bv.CATALOGUE.functions[op];
  const fn = (bv as unknown as Record<string, Operator>)[op === "var" ? "var" : op];
  const raw = { op, ...params };
  if (signature === undefined || fn === undefined || "where" in params) return raw;
  const accepted = new Set(signature.params.map((p) => p.name));
  const options: Record<string, bv.Json> = {};
  for (const [k, v] of Object.entries(params)) if (accepted.has(k) && k !== "field") options[k] = v;
  const call = fn as unknown as (...a: unknown[]) => bv.Feature;
  try {
    return accepted.has("field") ? call(params["field"], options) : call(options);
  } catch {
    return raw;
  }
}

interface WorkloadNode {
  kind: string;
  name: string;
  schema: { fields: Record<string, bv.WireType> };
  upstreams: string[];
  ops: { keys: string[]; agg: Record<string, { op: string; params: Record<string, bv.Json> }> }[];
}

/** A bench workload through the DSL (events without `event_time`, the DSL refuses it). */
function workload(file: string): unknown[] {
  const doc = JSON.parse(readFileSync(`${REPO}/bench/workloads/${file}`, "utf8")) as { register: { nodes: WorkloadNode[] } };
  const sources = new Map<string, bv.EventSource>();
  const out: unknown[] = [];
  for (const node of doc.register.nodes) {
    if (node.kind !== "event") continue;
    const fields = Object.fromEntries(Object.entries(node.schema.fields).filter(([k]) => k !== "event_time"));
    const source = bv.event(node.name, fields);
    sources.set(node.name, source as unknown as bv.EventSource);
    out.push(source);
  }
  for (const node of doc.register.nodes) {
    if (node.kind !== "derivation") continue;
    const step = node.ops[node.ops.length - 1] as WorkloadNode["ops"][number];
    const source = sources.get(node.upstreams[0] as string) as bv.EventSource;
    const features = Object.fromEntries(Object.entries(step.agg).map(([name, e]) => [name, workloadFeature(e)]));
    out.push(bv.table(node.name, { key: step.keys }, source.groupBy(...step.keys).agg(features)));
  }
  return out;
}

/** Pipeline key (as in python_payloads.py) -> the descriptors, in the Python order. */
export const PIPELINES: Record<string, () => unknown[]> = {
  "examples/agent_runtime_guardrails.py": agentRuntimeGuardrails,
  "examples/marketplace_reranking.py": marketplaceReranking,
  "examples/saas_growth_rescue.py": saasGrowthRescue,
  "docs/index.md": () => userSpend({ spend_1h: bv.sum("amount", { window: "1h" }), txns_24h: bv.count({ window: "24h" }) }),
  "docs/getting-started.md": () => userSpend({
    spend_1h: bv.sum("amount", { window: "1h" }),
    txns_24h: bv.count({ window: "24h" }),
    merchants_24h: bv.n_unique("merchant", { window: "24h" }),
    max_amount: bv.max("amount", { window: "24h" }),
  }, { merchant: "str" }),
  "docs/concepts.md": concepts,
  "docs/sdk.md": sdkPage,
  "docs/operations.md": () => userSpend({ spend_1h: bv.sum("amount", { window: "1h" }) }),
  "docs/wire.md": () => userSpend({ spend_1h: bv.sum("amount", { window: "1h" }) }),
  "docs/spark.md": () => userSpend({ spend_24h: bv.sum("amount", { window: "24h" }), txns_24h: bv.count({ window: "24h" }) }),
  "docs/operators.md": operatorReference,
  "bench/workloads/small.json": () => workload("small.json"),
  "bench/workloads/medium.json": () => workload("medium.json"),
  "bench/workloads/large-with-sketches.json": () => workload("large-with-sketches.json"),
  "bench/workloads/fraud-team.json": () => workload("fraud-team.json"),
};

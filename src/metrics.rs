//! Prometheus metrics (SPEC section 10): every metric's name, help and label set is here, so
//! labels stay of bounded cardinality (channel instance names, configured models, tool names,
//! fixed outcomes; never a session, chat or user id).
//!
//! The metrics are `prometheus-client` families in one registry, built on first use (a few
//! KB, no thread, no clock to calibrate). `GET /metrics` renders them in the Prometheus text
//! format, after setting the gauges read from storage at scrape time.

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Metric;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The `Content-Type` of what [`render`] returns.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Histogram buckets (seconds) for turn, model-call and first-token latencies.
const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// One sample's labels: fixed keys, values borrowed when they are fixed outcomes.
type Labels<const N: usize> = [(&'static str, Cow<'static, str>); N];
type Counters<const N: usize> = Family<Labels<N>, Counter>;
type Gauges<const N: usize> = Family<Labels<N>, Gauge<f64, AtomicU64>>;
type Histograms<const N: usize> = Family<Labels<N>, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// Every metric of the process, and the registry that renders them.
struct Metrics {
    registry: Registry,
    job_runs: Counters<1>,
    inbound: Counters<1>,
    secret_redactions: Counters<2>,
    mcp_calls: Counters<3>,
    mcp_call_seconds: Histograms<1>,
    mcp_server_down: Counters<1>,
    outbound: Counters<1>,
    delivery_retries: Counters<1>,
    delivery_rejected: Counters<1>,
    turns: Counters<1>,
    turn_duration: Histogram,
    model_calls: Counters<2>,
    model_call_duration: Histograms<1>,
    model_tokens: Counters<3>,
    cost_usd: Family<Labels<2>, Counter<f64, AtomicU64>>,
    first_token: Histograms<1>,
    fallbacks: Counters<1>,
    tool_calls: Counters<2>,
    subagents: Gauges<1>,
    subagent_runs: Counters<1>,
    lane_depth: Gauge<f64, AtomicU64>,
    outbox_backlog: Gauges<1>,
    channel_up: Gauges<1>,
    channel_last_receive_age: Gauges<1>,
}

/// Registers `metric` under its full sample name (counters' `_total` is added back by the
/// encoder) and returns the handle that records into it.
fn add<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    let name = name.strip_suffix("_total").unwrap_or(name);
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    /// One line per metric: its field, full sample name, help text and empty value.
    #[rustfmt::skip]
    fn new() -> Metrics {
        let r = &mut Registry::default();
        let histograms = || Histograms::new_with_constructor(latency_histogram as fn() -> _);
        Metrics {
            job_runs: add(r, "ferroclaw_job_runs_total", "Scheduled job runs by outcome", Counters::default()),
            inbound: add(r, "ferroclaw_inbound_messages_total", "Platform messages journalled", Counters::default()),
            secret_redactions: add(r, "ferroclaw_secret_redactions_total", "Secrets redacted from what was leaving", Counters::default()),
            mcp_calls: add(r, "ferroclaw_mcp_calls_total", "MCP tool calls by outcome", Counters::default()),
            mcp_call_seconds: add(r, "ferroclaw_mcp_call_seconds", "MCP tool call latency", histograms()),
            mcp_server_down: add(r, "ferroclaw_mcp_server_down_total", "MCP servers that went down", Counters::default()),
            outbound: add(r, "ferroclaw_outbound_messages_total", "Bot messages delivered", Counters::default()),
            delivery_retries: add(r, "ferroclaw_delivery_retries_total", "Deliveries to be tried again", Counters::default()),
            delivery_rejected: add(r, "ferroclaw_delivery_rejected_total", "Deliveries the platform rejected for good", Counters::default()),
            turns: add(r, "ferroclaw_turns_total", "Turns by outcome", Counters::default()),
            turn_duration: add(r, "ferroclaw_turn_duration_seconds", "Turn latency", latency_histogram()),
            model_calls: add(r, "ferroclaw_model_calls_total", "Model calls (attempts) by outcome", Counters::default()),
            model_call_duration: add(r, "ferroclaw_model_call_duration_seconds", "Model call latency", histograms()),
            model_tokens: add(r, "ferroclaw_model_tokens_total", "Model tokens by direction", Counters::default()),
            cost_usd: add(r, "ferroclaw_cost_usd_total", "Model spend in USD (priced models)", Family::default()),
            first_token: add(r, "ferroclaw_time_to_first_token_seconds", "Time to a model call's first streamed token", histograms()),
            fallbacks: add(r, "ferroclaw_fallbacks_total", "Fallbacks away from a model", Counters::default()),
            tool_calls: add(r, "ferroclaw_tool_calls_total", "Tool calls by outcome", Counters::default()),
            subagents: add(r, "ferroclaw_subagents", "Live subagents by state", Gauges::default()),
            subagent_runs: add(r, "ferroclaw_subagent_runs_total", "Subagent runs by final state", Counters::default()),
            lane_depth: add(r, "ferroclaw_lane_queue_depth", "Journal entries waiting in or running on session lanes", Gauge::default()),
            outbox_backlog: add(r, "ferroclaw_outbox_backlog", "Undelivered bot messages", Gauges::default()),
            channel_up: add(r, "ferroclaw_channel_up", "Channel up (1, also when degraded) or down (0)", Gauges::default()),
            channel_last_receive_age: add(r, "ferroclaw_channel_last_receive_age_seconds", "Seconds since a channel's last completed receive", Gauges::default()),
            // Last: every metric above is registered by now.
            registry: std::mem::take(r),
        }
    }
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

fn owned(value: &str) -> Cow<'static, str> {
    Cow::Owned(value.to_string())
}

/// Every metric in the Prometheus text format (version 0.0.4).
pub fn render() -> String {
    let mut text = String::with_capacity(8 * 1024);
    prometheus_text::encode(&mut text, &metrics().registry).expect("writing to a String");
    text
}

/// A scheduled job's due run: `fired`, `missed_run_once` or `skipped`.
pub fn job_run(outcome: &'static str) {
    metrics()
        .job_runs
        .get_or_create(&[("outcome", outcome.into())])
        .inc();
}

/// A platform message journalled for the first time.
pub fn inbound(channel: &str) {
    metrics()
        .inbound
        .get_or_create(&[("channel", owned(channel))])
        .inc();
}

/// A secret (named by its variable) redacted from what was leaving through `sink`.
pub fn secret_redacted(variable: &str, sink: &'static str) {
    let labels = [("name", owned(variable)), ("sink", sink.into())];
    metrics().secret_redactions.get_or_create(&labels).inc();
}

/// An MCP tool call ended: `ok`, `error` (the server said so), `timeout`, `down`, `failed`.
pub fn mcp_call(server: &str, tool: &str, outcome: &'static str, took: Duration) {
    let m = metrics();
    let labels = [
        ("server", owned(server)),
        ("tool", owned(tool)),
        ("outcome", outcome.into()),
    ];
    m.mcp_calls.get_or_create(&labels).inc();
    let labels = [("server", owned(server))];
    m.mcp_call_seconds
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
}

/// An MCP server went down (it is restarted with backoff).
pub fn mcp_server_down(server: &str) {
    metrics()
        .mcp_server_down
        .get_or_create(&[("server", owned(server))])
        .inc();
}

/// A bot message delivered to its platform.
pub fn outbound(channel: &str) {
    metrics()
        .outbound
        .get_or_create(&[("channel", owned(channel))])
        .inc();
}

/// A delivery that will be tried again, or that the platform rejected for good.
pub fn delivery_failed(channel: &str, retry: bool) {
    let m = metrics();
    let family = if retry {
        &m.delivery_retries
    } else {
        &m.delivery_rejected
    };
    family.get_or_create(&[("channel", owned(channel))]).inc();
}

/// A turn ended: `answered`, `error` (answered with an error message), `failed` (the turn
/// could not run), `given_up` (it crashed the process too often).
pub fn turn(outcome: &'static str, took: Duration) {
    let m = metrics();
    m.turns.get_or_create(&[("outcome", outcome.into())]).inc();
    m.turn_duration.observe(took.as_secs_f64());
}

/// One model call (one attempt) ended.
pub fn model_call(model: &str, outcome: &'static str, took: Duration) {
    let m = metrics();
    let labels = [("model", owned(model)), ("outcome", outcome.into())];
    m.model_calls.get_or_create(&labels).inc();
    let labels = [("model", owned(model))];
    m.model_call_duration
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
}

/// What one answered model call used (every call, silent ones included): tokens by
/// direction (`input` counts every input token; `cached_input` and `cache_write` are the
/// parts of it read from and written to the provider's cache) and, for a priced model, USD.
pub fn model_usage(
    model: &str,
    kind: &'static str,
    tokens: &[(&'static str, i64)],
    cost: Option<f64>,
) {
    let m = metrics();
    for (direction, tokens) in tokens {
        let labels = [
            ("model", owned(model)),
            ("kind", kind.into()),
            ("direction", (*direction).into()),
        ];
        m.model_tokens
            .get_or_create(&labels)
            .inc_by((*tokens).max(0) as u64);
    }
    if let Some(cost) = cost {
        let labels = [("model", owned(model)), ("kind", kind.into())];
        m.cost_usd.get_or_create(&labels).inc_by(cost.max(0.0));
    }
}

/// The first streamed token of a model call arrived.
pub fn first_token(model: &str, after: Duration) {
    let labels = [("model", owned(model))];
    metrics()
        .first_token
        .get_or_create(&labels)
        .observe(after.as_secs_f64());
}

/// The chain gave up on `model` and moved to the next one.
pub fn fallback(model: &str) {
    metrics()
        .fallbacks
        .get_or_create(&[("from", owned(model))])
        .inc();
}

/// A tool call ended (`ok` or `error`). `tool` is a registered tool's name or `unknown`.
pub fn tool_call(tool: &str, ok: bool) {
    let outcome = if ok { "ok" } else { "error" };
    let labels = [("tool", owned(tool)), ("outcome", outcome.into())];
    metrics().tool_calls.get_or_create(&labels).inc();
}

/// Live subagents by state (`queued`, `running`): +1 or -1.
pub fn subagents_live(state: &'static str, delta: f64) {
    metrics()
        .subagents
        .get_or_create(&[("state", state.into())])
        .inc_by(delta);
}

/// A subagent run ended in `state` (done, failed, killed, timed_out).
pub fn subagent_ended(state: &'static str) {
    metrics()
        .subagent_runs
        .get_or_create(&[("state", state.into())])
        .inc();
}

/// Journal entries waiting in (or running on) session lanes: +1 or -1.
pub fn lane_depth(delta: f64) {
    metrics().lane_depth.inc_by(delta);
}

/// Undelivered bot messages of a channel (read from storage at scrape time).
pub fn outbox_backlog(channel: &str, count: i64) {
    let labels = [("channel", owned(channel))];
    metrics()
        .outbox_backlog
        .get_or_create(&labels)
        .set(count as f64);
}

/// A channel's health: up (1, also when degraded) or down (0), and how long since its last
/// completed receive (channels that track one).
pub fn channel_health(channel: &str, up: bool, last_receive_age_secs: Option<u64>) {
    let m = metrics();
    let labels = [("channel", owned(channel))];
    m.channel_up
        .get_or_create(&labels)
        .set(if up { 1.0 } else { 0.0 });
    if let Some(age) = last_receive_age_secs {
        m.channel_last_receive_age
            .get_or_create(&labels)
            .set(age as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_once_with_total_and_histograms_with_their_buckets() {
        inbound("metrics-unit-test");
        inbound("metrics-unit-test");
        model_usage("metrics-unit-model", "turn", &[("input", 7)], Some(0.25));
        model_call("metrics-unit-model", "ok", Duration::from_millis(30));
        let text = render();
        assert!(
            text.contains("# TYPE ferroclaw_inbound_messages_total counter"),
            "{text}"
        );
        assert!(
            text.contains("ferroclaw_inbound_messages_total{channel=\"metrics-unit-test\"} 2"),
            "{text}"
        );
        assert!(!text.contains("_total_total"), "{text}");
        assert!(text.contains(
            "ferroclaw_model_tokens_total{model=\"metrics-unit-model\",kind=\"turn\",direction=\"input\"} 7"
        ), "{text}");
        assert!(
            text.contains(
                "ferroclaw_cost_usd_total{model=\"metrics-unit-model\",kind=\"turn\"} 0.25"
            ),
            "{text}"
        );
        assert!(text.contains(
            "ferroclaw_model_call_duration_seconds_bucket{model=\"metrics-unit-model\",le=\"0.05\"} 1"
        ), "{text}");
        assert!(text.contains(
            "ferroclaw_model_call_duration_seconds_bucket{model=\"metrics-unit-model\",le=\"0.025\"} 0"
        ), "{text}");
        assert!(
            text.contains("# TYPE ferroclaw_lane_queue_depth gauge"),
            "{text}"
        );
        assert!(
            !text.contains("# EOF"),
            "the 0.0.4 text format has no EOF marker"
        );
    }
}

//! Prometheus metrics (SPEC section 10) through the `metrics` facade and its Prometheus
//! exporter: every metric name and label set is here, so labels stay of bounded cardinality
//! (channel instance names, configured models, tool names, fixed outcomes; never a session,
//! chat or user id).
//!
//! The recorder is installed once per process by [`install`] (a few KB; recording before it is
//! a no-op). `GET /metrics` renders it, adding the gauges read from storage at scrape time.
//!
//! Building the recorder calibrates `quanta`'s clock (the exporter's): a busy loop against
//! the OS clock until the two agree within 10 ns, cut off after 200 ms. On a 2-core VM it
//! usually took a few milliseconds, and one start in fifty waited 230 ms for it.
//! [`prepare`] runs it on its own thread while the process loads its configuration and opens
//! the database; `install` then waits for it.

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::Duration;

/// Histogram buckets (seconds) for turn, model-call and first-token latencies.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Install the process-wide recorder (idempotent); its handle renders the text format.
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(BUCKETS)
            .expect("fixed, non-empty buckets")
            .build_recorder();
        let handle = recorder.handle();
        // Another recorder (a test harness) may be installed already; ours then records
        // nothing, which only affects that process's /metrics.
        let _ = metrics::set_global_recorder(recorder);
        handle
    })
}

/// Start installing the recorder on a thread of its own (see the module doc). The thread
/// ends when it is installed; [`install`] waits for it.
pub fn prepare() {
    let _ = std::thread::Builder::new()
        .name("metrics-install".into())
        .spawn(|| {
            install();
        });
}

/// A scheduled job's due run: `fired`, `missed_run_once` or `skipped`.
pub fn job_run(outcome: &'static str) {
    counter!("ferroclaw_job_runs_total", "outcome" => outcome).increment(1);
}

/// A platform message journalled for the first time.
pub fn inbound(channel: &str) {
    counter!("ferroclaw_inbound_messages_total", "channel" => channel.to_string()).increment(1);
}

/// A secret (named by its variable) redacted from what was leaving through `sink`.
pub fn secret_redacted(variable: &str, sink: &'static str) {
    counter!("ferroclaw_secret_redactions_total", "name" => variable.to_string(), "sink" => sink)
        .increment(1);
}

/// An MCP tool call ended: `ok`, `error` (the server said so), `timeout`, `down`, `failed`.
pub fn mcp_call(server: &str, tool: &str, outcome: &'static str, took: Duration) {
    counter!("ferroclaw_mcp_calls_total", "server" => server.to_string(), "tool" => tool.to_string(), "outcome" => outcome)
        .increment(1);
    histogram!("ferroclaw_mcp_call_seconds", "server" => server.to_string())
        .record(took.as_secs_f64());
}

/// An MCP server went down (it is restarted with backoff).
pub fn mcp_server_down(server: &str) {
    counter!("ferroclaw_mcp_server_down_total", "server" => server.to_string()).increment(1);
}

/// A bot message delivered to its platform.
pub fn outbound(channel: &str) {
    counter!("ferroclaw_outbound_messages_total", "channel" => channel.to_string()).increment(1);
}

/// A delivery that will be tried again, or that the platform rejected for good.
pub fn delivery_failed(channel: &str, retry: bool) {
    let name = if retry {
        "ferroclaw_delivery_retries_total"
    } else {
        "ferroclaw_delivery_rejected_total"
    };
    counter!(name, "channel" => channel.to_string()).increment(1);
}

/// A turn ended: `answered`, `error` (answered with an error message), `failed` (the turn
/// could not run), `given_up` (it crashed the process too often).
pub fn turn(outcome: &'static str, took: Duration) {
    counter!("ferroclaw_turns_total", "outcome" => outcome).increment(1);
    histogram!("ferroclaw_turn_duration_seconds").record(took.as_secs_f64());
}

/// One model call (one attempt) ended.
pub fn model_call(model: &str, outcome: &'static str, took: Duration) {
    counter!("ferroclaw_model_calls_total", "model" => model.to_string(), "outcome" => outcome)
        .increment(1);
    histogram!("ferroclaw_model_call_duration_seconds", "model" => model.to_string())
        .record(took.as_secs_f64());
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
    for (direction, tokens) in tokens {
        counter!("ferroclaw_model_tokens_total", "model" => model.to_string(), "kind" => kind, "direction" => *direction)
            .increment((*tokens).max(0) as u64);
    }
    if let Some(cost) = cost {
        // The facade's counters count whole numbers; dollars are fractions, so this sum is a
        // gauge that only ever goes up.
        gauge!("ferroclaw_cost_usd_total", "model" => model.to_string(), "kind" => kind)
            .increment(cost);
    }
}

/// The first streamed token of a model call arrived.
pub fn first_token(model: &str, after: Duration) {
    histogram!("ferroclaw_time_to_first_token_seconds", "model" => model.to_string())
        .record(after.as_secs_f64());
}

/// The chain gave up on `model` and moved to the next one.
pub fn fallback(model: &str) {
    counter!("ferroclaw_fallbacks_total", "from" => model.to_string()).increment(1);
}

/// A tool call ended (`ok` or `error`). `tool` is a registered tool's name or `unknown`.
pub fn tool_call(tool: &str, ok: bool) {
    let outcome = if ok { "ok" } else { "error" };
    counter!("ferroclaw_tool_calls_total", "tool" => tool.to_string(), "outcome" => outcome)
        .increment(1);
}

/// Live subagents by state (`queued`, `running`): +1 or -1.
pub fn subagents_live(state: &'static str, delta: f64) {
    gauge!("ferroclaw_subagents", "state" => state).increment(delta);
}

/// A subagent run ended in `state` (done, failed, killed, timed_out).
pub fn subagent_ended(state: &'static str) {
    counter!("ferroclaw_subagent_runs_total", "state" => state).increment(1);
}

/// Journal entries waiting in (or running on) session lanes: +1 or -1.
pub fn lane_depth(delta: f64) {
    gauge!("ferroclaw_lane_queue_depth").increment(delta);
}

/// Undelivered bot messages of a channel (read from storage at scrape time).
pub fn outbox_backlog(channel: &str, count: i64) {
    gauge!("ferroclaw_outbox_backlog", "channel" => channel.to_string()).set(count as f64);
}

/// A channel's health: up (1, also when degraded) or down (0), and how long since its last
/// completed receive (channels that track one).
pub fn channel_health(channel: &str, up: bool, last_receive_age_secs: Option<u64>) {
    gauge!("ferroclaw_channel_up", "channel" => channel.to_string()).set(if up {
        1.0
    } else {
        0.0
    });
    if let Some(age) = last_receive_age_secs {
        gauge!("ferroclaw_channel_last_receive_age_seconds", "channel" => channel.to_string())
            .set(age as f64);
    }
}

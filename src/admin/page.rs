//! The status page at `/`: server-rendered HTML with no script and no external asset, that
//! reloads itself every 5 seconds. Channels and whether they still receive, live sessions,
//! running subagents as a tree under the session that spawned them (with what each is doing
//! now), today's spend, MCP servers, recent warnings and errors.

use super::Admin;
use crate::subagents::{LiveRunView, Registry};
use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Sessions listed (most recently active first).
const SESSIONS: i64 = 25;

fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    html_escape::encode_safe(text)
}

fn ago(at_ms: i64) -> String {
    let secs = ((crate::clock::now_ms() - at_ms) / 1000).max(0);
    match secs {
        0..60 => format!("{secs} s ago"),
        60..3600 => format!("{} min ago", secs / 60),
        _ => format!("{} h ago", secs / 3600),
    }
}

/// One run and, nested, the live runs it spawned.
fn run_item(out: &mut String, run: &LiveRunView, all: &[LiveRunView]) {
    let doing = if run.activity.is_empty() {
        String::new()
    } else {
        format!(" — <code>{}</code>", escape(&run.activity))
    };
    let _ = write!(
        out,
        "<li class=\"run\" data-run=\"{id}\"><b>{label}</b> <span class=\"state\">{state}</span>{doing} <small>{id}</small>",
        id = escape(&run.id),
        label = escape(&run.label),
        state = run.state.as_str(),
    );
    let own = Registry::session_key(&run.agent, &run.id);
    let children: Vec<&LiveRunView> = all.iter().filter(|r| r.parent_session == own).collect();
    if !children.is_empty() {
        out.push_str("<ul>");
        for child in children {
            run_item(out, child, all);
        }
        out.push_str("</ul>");
    }
    out.push_str("</li>");
}

/// Each channel's state and figures (what `/readyz?verbose` shows).
fn channel_table(html: &mut String, admin: &Admin) {
    html.push_str(
        "<h2>Channels</h2><table id=\"channels\"><tr><th>channel</th><th>state</th>\
         <th>last receive</th><th>restarts</th><th>detail</th></tr>",
    );
    let states = admin.channels.json();
    for (name, health) in states.as_object().into_iter().flatten() {
        let age = health["last_receive_age_secs"]
            .as_u64()
            .map_or("-".to_string(), |a| format!("{a} s ago"));
        let detail = match health["received_by"].as_str() {
            Some(by) => format!("received by {by}"),
            None => health["detail"].as_str().unwrap_or("").to_string(),
        };
        let _ = write!(
            html,
            "<tr data-channel=\"{name}\"><td>{name}</td><td class=\"state {state}\">{state}</td>\
             <td>{age}</td><td>{restarts}</td><td class=\"error\">{detail}</td></tr>",
            name = escape(name),
            state = escape(health["state"].as_str().unwrap_or("?")),
            restarts = health["restarts"].as_u64().unwrap_or(0),
            detail = escape(&detail),
        );
    }
    html.push_str("</table>");
}

/// Users listed under today's spend.
const TOP_USERS: usize = 5;

/// Today's spend (UTC) and the people who spent most of it.
async fn spend(html: &mut String, admin: &Admin) {
    let today = crate::clock::utc_day(crate::clock::now_ms());
    let filter = crate::storage::UsageFilter::days(today.clone(), today);
    let total = admin.store.usage_total(&filter).await.unwrap_or_default();
    let _ = write!(
        html,
        "<h2>Spend today</h2><p id=\"spend\">${:.4} — {} model calls, {} tokens in, {} out</p><ol id=\"top-users\">",
        total.cost_usd, total.calls, total.input_tokens, total.output_tokens
    );
    let users = admin
        .store
        .usage_report(&filter, Some(crate::storage::UsageGroup::User))
        .await
        .unwrap_or_default();
    for user in users.iter().filter(|u| !u.key.is_empty()).take(TOP_USERS) {
        let _ = write!(
            html,
            "<li><code>{}</code> ${:.4} ({} calls)</li>",
            escape(&user.key),
            user.cost_usd,
            user.calls
        );
    }
    html.push_str("</ol>");
}

pub(super) async fn status(State(admin): State<Admin>) -> Response {
    let busy = admin.lanes.busy();
    let sessions = admin
        .store
        .session_list(None, SESSIONS, 0)
        .await
        .unwrap_or_default();
    let runs = admin.subagents.live_runs();
    let mut html = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"5\">\
         <title>ferroclaw status</title><style>body{font:14px system-ui,sans-serif;margin:2em;color:#222}\
         h2{margin-top:1.5em}table{border-collapse:collapse}td,th{padding:.2em .8em;text-align:left;\
         border-bottom:1px solid #ddd}.busy{color:#b60}.state{color:#06c}li{margin:.2em 0}\
         .error{color:#b00}.down{color:#b00;font-weight:bold}.degraded{color:#b60}code{background:#f4f4f4;padding:0 .3em}</style></head><body>\
         <h1>ferroclaw</h1>",
    );
    channel_table(&mut html, &admin);
    // Sessions: the busy ones first, then the most recently active.
    let _ = write!(
        html,
        "<h2>Sessions</h2><p>{} busy now</p><table><tr><th>session</th><th>state</th>\
         <th>model</th><th>tokens in/out</th><th>last active</th></tr>",
        busy.len()
    );
    for s in &sessions {
        let state = if busy.contains(&s.key) {
            "<span class=\"busy\">working</span>"
        } else {
            "idle"
        };
        let _ = write!(
            html,
            "<tr><td><code>{}</code></td><td>{state}</td><td>{}</td><td>{} / {}</td><td>{}</td></tr>",
            escape(&s.key),
            escape(
                s.last_model
                    .as_deref()
                    .or(s.model.as_deref())
                    .unwrap_or("-")
            ),
            s.tokens_in,
            s.tokens_out,
            ago(s.updated_at)
        );
    }
    html.push_str("</table>");
    // Subagents: a tree under each session that spawned them.
    let _ = write!(html, "<h2>Subagents</h2><p>{} live</p>", runs.len());
    let run_sessions: Vec<String> = runs
        .iter()
        .map(|r| Registry::session_key(&r.agent, &r.id))
        .collect();
    let mut roots: BTreeMap<&str, Vec<&LiveRunView>> = BTreeMap::new();
    for run in &runs {
        if !run_sessions.contains(&run.parent_session) {
            roots.entry(&run.parent_session).or_default().push(run);
        }
    }
    html.push_str("<ul id=\"subagents\">");
    for (session, top) in roots {
        let _ = write!(
            html,
            "<li class=\"parent\"><code>{}</code><ul>",
            escape(session)
        );
        for run in top {
            run_item(&mut html, run, &runs);
        }
        html.push_str("</ul></li>");
    }
    html.push_str("</ul>");
    spend(&mut html, &admin).await;
    // Recent warnings and errors.
    let servers = admin.mcp.statuses();
    if !servers.is_empty() {
        html.push_str("<h2>MCP servers</h2><table><tr><th>server</th><th>state</th><th>tools</th><th>last error</th></tr>");
        for s in servers {
            html.push_str(&format!(
                "<tr><td>{}</td><td class=\"state\">{}</td><td>{}</td><td class=\"error\">{}</td></tr>",
                escape(&s.id),
                format!("{:?}", s.state).to_lowercase(),
                s.tools.len(),
                escape(s.last_error.as_deref().unwrap_or(""))
            ));
        }
        html.push_str("</table>");
    }
    html.push_str("<h2>Recent errors</h2><ul>");
    let recent = crate::recent_errors::recent();
    if recent.is_empty() {
        html.push_str("<li>none</li>");
    }
    for r in recent {
        let _ = write!(
            html,
            "<li class=\"{}\">{} — {}</li>",
            r.level,
            ago(r.at_ms),
            escape(&r.text)
        );
    }
    html.push_str("</ul></body></html>");
    (
        [
            // No script, no external asset, no frame, no form: the policy says so.
            (
                axum::http::header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
            ),
            (axum::http::header::X_FRAME_OPTIONS, "DENY"),
            // The page's URL may carry ?token=: never sent on as a referrer.
            (axum::http::header::REFERRER_POLICY, "no-referrer"),
            (axum::http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (axum::http::header::CACHE_CONTROL, "no-store"),
        ],
        Html(html),
    )
        .into_response()
}

//! `GET /v1/admin/usage?from=&to=&group_by=`: model usage and cost over UTC days (`from` and
//! `to` are `YYYY-MM-DD`, both included, default today), in total and grouped by user, chat,
//! agent, model, kind or day. The same sums `/usage` shows.

use super::Admin;
use crate::storage::{UsageFilter, UsageGroup, UsageTotal};
use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

#[derive(serde::Deserialize)]
pub(super) struct UsageQuery {
    from: Option<String>,
    to: Option<String>,
    group_by: Option<String>,
}

fn bad(field: &str, why: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": format!("field `{field}`: {why}")})),
    )
        .into_response()
}

/// A `YYYY-MM-DD` date, checked (it is compared as text with the stored days); `Err` is
/// what is wrong with it.
fn day(given: Option<String>, today: &str) -> Result<String, &'static str> {
    let Some(given) = given else {
        return Ok(today.to_string());
    };
    match given.parse::<jiff::civil::Date>() {
        Ok(date) if given.len() == 10 => Ok(date.to_string()),
        _ => Err("must be a date as YYYY-MM-DD (UTC)"),
    }
}

fn totals(t: &UsageTotal) -> Value {
    json!({
        "key": t.key, "calls": t.calls, "input_tokens": t.input_tokens,
        "output_tokens": t.output_tokens, "cached_input_tokens": t.cached_input_tokens,
        "cache_write_tokens": t.cache_write_tokens, "cost_usd": t.cost_usd,
        "unpriced_calls": t.unpriced_calls, "cache_hit_rate": t.cache_hit_rate(),
    })
}

pub(super) async fn usage(State(admin): State<Admin>, Query(q): Query<UsageQuery>) -> Response {
    let today = crate::clock::utc_day(crate::clock::now_ms());
    let from_day = match day(q.from, &today) {
        Ok(day) => day,
        Err(why) => return bad("from", why),
    };
    let to_day = match day(q.to, &today) {
        Ok(day) => day,
        Err(why) => return bad("to", why),
    };
    let group = match q.group_by.as_deref() {
        None | Some("") => None,
        Some(name) => match UsageGroup::parse(name) {
            Some(group) => Some(group),
            None => {
                return bad(
                    "group_by",
                    "must be one of user, chat, agent, model, kind, day",
                );
            }
        },
    };
    let filter = UsageFilter::days(from_day, to_day);
    let total = match admin.store.usage_total(&filter).await {
        Ok(total) => total,
        Err(e) => return super::replies::unavailable(e),
    };
    let groups = match group {
        Some(group) => match admin.store.usage_report(&filter, Some(group)).await {
            Ok(rows) => rows.iter().map(totals).collect(),
            Err(e) => return super::replies::unavailable(e),
        },
        None => Vec::new(),
    };
    Json(json!({
        "from": filter.from_day, "to": filter.to_day, "group_by": q.group_by,
        "total": totals(&total), "groups": groups,
    }))
    .into_response()
}

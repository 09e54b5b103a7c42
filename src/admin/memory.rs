//! `GET|DELETE /v1/admin/memory?user=<channel>:<user id>` (or `?chat=<channel>:<chat id>`):
//! export or erase one person's (or one chat's) memories; `POST /v1/admin/memory/link` with
//! `{"user": "<channel>:<id>", "with": "<channel>:<id>"}` links two identities of one person
//! (the operator's way beside `/link`).

use super::Admin;
use crate::storage::{MemoryRow, person_scope};
use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The most memories one export holds.
const EXPORT: i64 = 100_000;

#[derive(serde::Deserialize)]
pub(super) struct Whose {
    user: Option<String>,
    chat: Option<String>,
}

fn bad(field: &str, why: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": format!("field `{field}`: {why}")})),
    )
        .into_response()
}

fn failed(err: crate::storage::StoreError) -> Response {
    tracing::warn!(error = %err, "memory admin request failed");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"error": "the store is not available"})),
    )
        .into_response()
}

/// An identity as `<channel>:<id>` (the channel may hold a colon itself: `webhook:NAME`).
fn identity(given: &str) -> bool {
    given
        .rsplit_once(':')
        .is_some_and(|(channel, id)| !channel.is_empty() && !id.is_empty())
}

/// The scope a request names, and how it is shown.
async fn scope(admin: &Admin, q: &Whose) -> Result<(String, Value), Response> {
    match (&q.user, &q.chat) {
        (Some(user), None) if identity(user) => {
            let person = admin.store.memory_person(user).await.map_err(failed)?;
            Ok((
                person_scope(&person),
                json!({"user": user, "person": person}),
            ))
        }
        (None, Some(chat)) if identity(chat) => Ok((format!("chat:{chat}"), json!({"chat": chat}))),
        (Some(_), None) => Err(bad("user", "must be <channel>:<user id>, e.g. telegram:42")),
        (None, Some(_)) => Err(bad("chat", "must be <channel>:<chat id>")),
        _ => Err(bad("user", "give exactly one of `user` and `chat`")),
    }
}

fn memory_json(row: &MemoryRow) -> Value {
    json!({"id": row.id, "text": row.text, "tags": row.tags, "created_at": row.created_at})
}

pub(super) async fn export(State(admin): State<Admin>, Query(q): Query<Whose>) -> Response {
    let (scope, mut whose) = match scope(&admin, &q).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    let rows = match admin
        .store
        .memory_recent(std::slice::from_ref(&scope), EXPORT)
        .await
    {
        Ok(rows) => rows,
        Err(err) => return failed(err),
    };
    whose["memories"] = rows.iter().map(memory_json).collect();
    Json(whose).into_response()
}

pub(super) async fn erase(State(admin): State<Admin>, Query(q): Query<Whose>) -> Response {
    let (scope, mut whose) = match scope(&admin, &q).await {
        Ok(found) => found,
        Err(response) => return response,
    };
    match admin.store.memory_forget_scope(&scope).await {
        Ok(deleted) => {
            whose["deleted"] = deleted.into();
            Json(whose).into_response()
        }
        Err(err) => failed(err),
    }
}

#[derive(serde::Deserialize)]
pub(super) struct Link {
    user: String,
    with: String,
}

pub(super) async fn link(State(admin): State<Admin>, Json(body): Json<Link>) -> Response {
    if !identity(&body.user) {
        return bad("user", "must be <channel>:<user id>");
    }
    if !identity(&body.with) {
        return bad("with", "must be <channel>:<user id>");
    }
    match admin
        .store
        .memory_link(&body.user, &body.with, crate::clock::now_ms())
        .await
    {
        Ok(person) => Json(json!({"user": body.user, "person": person})).into_response(),
        Err(err) => failed(err),
    }
}

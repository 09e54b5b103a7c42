//! The operator's view (SPEC section 10): the admin API under `/v1/admin/` (sessions, subagent
//! runs, the outbox backlog, pairing, usage) and a status page at `/`, both behind the bearer token
//! of `server.admin_token_env` (compared in constant time). With no token configured every
//! route here answers 404, as if it did not exist.
//!
//! Reads storage and the live views of the lanes and the subagent registry; changes nothing
//! but pairing (the same as `ferroclaw pairing`). Knows no channel and no platform.

mod api;
mod approvals;
mod memory;
mod page;
mod replies;
mod usage;

use crate::lanes::Lanes;
use crate::storage::Store;
use crate::subagents::Registry;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use secrecy::{ExposeSecret, SecretString};
use std::sync::Arc;

/// What the admin routes read.
#[derive(Clone)]
pub struct Admin {
    pub store: Arc<dyn Store>,
    pub lanes: Lanes,
    pub subagents: Arc<Registry>,
    pub skills: Arc<crate::skills::SkillLibrary>,
    pub mcp: Arc<crate::mcp::McpServers>,
    /// Every channel's health (the channel table).
    pub channels: crate::health::ChannelStates,
    token: Arc<SecretString>,
}

impl Admin {
    pub fn new(
        store: Arc<dyn Store>,
        lanes: Lanes,
        subagents: Arc<Registry>,
        skills: Arc<crate::skills::SkillLibrary>,
        mcp: Arc<crate::mcp::McpServers>,
        channels: crate::health::ChannelStates,
        token: SecretString,
    ) -> Self {
        Admin {
            store,
            lanes,
            subagents,
            skills,
            mcp,
            channels,
            token: Arc::new(token),
        }
    }
}

/// The admin API and the status page; None (nothing mounted, so 404) without a token.
pub fn router(admin: Option<Admin>) -> Router {
    let Some(admin) = admin else {
        return Router::new();
    };
    Router::new()
        .route("/", axum::routing::get(page::status))
        .merge(api::routes())
        .route_layer(axum::middleware::from_fn_with_state(
            admin.clone(),
            authorised,
        ))
        .with_state(admin)
}

/// The token from `Authorization: Bearer …` or, for a browser opening a page (GET only: a
/// token in a URL must never authorise a change, which a link or a form could trigger),
/// `?token=…`.
fn given_token<'a>(
    method: &axum::http::Method,
    headers: &'a HeaderMap,
    query: Option<&'a str>,
) -> Option<&'a str> {
    ferroclaw_channel_core::auth::bearer(headers).or_else(|| {
        if method != axum::http::Method::GET && method != axum::http::Method::HEAD {
            return None;
        }
        query?
            .split('&')
            .find_map(|pair| pair.strip_prefix("token="))
    })
}

async fn authorised(State(admin): State<Admin>, request: Request, next: Next) -> Response {
    let given =
        given_token(request.method(), request.headers(), request.uri().query()).unwrap_or("");
    if !ferroclaw_channel_core::auth::token_matches(given, admin.token.expose_secret()) {
        let body = axum::Json(serde_json::json!({"error": "missing or wrong admin token"}));
        return (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            body,
        )
            .into_response();
    }
    next.run(request).await
}

//! Receiving updates: long polling (the offset moves past an update only after the inbox
//! has it) or the webhook route (answers 200 only after the inbox has it; checks Telegram's
//! secret-token header in constant time).

use crate::channel::TelegramChannel;
use crate::{Mode, Settings, translate};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use ferroclaw_channel_core::backoff::Backoff;
use ferroclaw_channel_core::{ChatKind, DecisionRequest, InboundMessage, Inbox};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use teloxide::prelude::*;
use teloxide::types::{AllowedUpdate, BotCommand, CallbackQueryId, Me, Update};
use teloxide::{ApiError, RequestError};
use tokio_util::sync::CancellationToken;

pub const WEBHOOK_PATH: &str = "/v1/telegram/webhook";

/// Makes a new bot for `getUpdates` each time the receiver is restarted (None: the client
/// could not be built).
pub(crate) type NewBot = Arc<dyn Fn() -> Option<Bot> + Send + Sync>;

pub(crate) struct Shared {
    pub(crate) bot: Bot,
    /// The same bot on a client whose timeout outlasts the long poll (`getUpdates` only).
    pub(crate) poll_bot: Bot,
    pub(crate) new_poll_bot: NewBot,
    pub(crate) inbox: Arc<dyn Inbox>,
    pub(crate) me: OnceLock<Me>,
    pub(crate) webhook_secret: String,
    pub(crate) settings: Settings,
    pub(crate) channel: Arc<TelegramChannel>,
}

/// A stable webhook secret derived from the bot token (so restarts keep it valid).
pub(crate) fn webhook_secret(token: &str) -> String {
    let digest = Sha256::digest(format!("ferroclaw-telegram-webhook:{token}").as_bytes());
    hex::encode(&digest[..24])
}

impl Shared {
    /// The message to journal, or None when it is not for us (no text, a bot, a group
    /// message without mention when mentions are required).
    fn wanted(&self, update: &Update, me: &Me) -> Option<InboundMessage> {
        let mut message = translate::inbound(translate::message(update)?, me)?;
        if message.route.kind == ChatKind::Group
            && self.settings.require_mention_in_groups
            && !message.mentioned
        {
            // A voice note cannot carry a mention: it is kept, and answered only when its
            // transcript names the bot.
            let spoken = message.attachments.iter().any(|a| {
                matches!(
                    a.kind,
                    ferroclaw_channel_core::AttachmentKind::Voice
                        | ferroclaw_channel_core::AttachmentKind::Audio
                )
            });
            if !spoken {
                return None;
            }
            let username = me.user.username.clone().unwrap_or_default();
            message.mention_names = [format!("@{username}"), username, me.user.first_name.clone()]
                .into_iter()
                .filter(|n| !n.is_empty() && n != "@")
                .collect();
        }
        Some(message)
    }

    /// Hand a button press to the inbox (journalled and carried out, retried until it is
    /// durable), then answer it: the person sees what became of it.
    async fn hand_over_press(
        &self,
        request: DecisionRequest,
        query: CallbackQueryId,
        cancel: &CancellationToken,
    ) -> bool {
        loop {
            match self.inbox.decide(request.clone()).await {
                Ok(outcome) => {
                    self.answer_press(query, &outcome.words()).await;
                    return true;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not journal a Telegram button press; retrying");
                    tokio::select! {
                        _ = cancel.cancelled() => return false,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        }
    }

    /// `answerCallbackQuery` with a short text (the client stops its spinner and shows it).
    async fn answer_press(&self, query: CallbackQueryId, text: &str) {
        if let Err(e) = self.bot.answer_callback_query(query).text(text).await {
            tracing::warn!(error = %self.channel.redact(e.to_string()), "answerCallbackQuery failed");
        }
    }

    /// Hand a message to the inbox, retrying until it is durable (never skipped).
    async fn hand_over(&self, message: InboundMessage, cancel: &CancellationToken) -> bool {
        let inbox = &self.inbox;
        loop {
            match inbox.accept(message.clone()).await {
                Ok(_) => return true,
                Err(e) => {
                    tracing::warn!(error = %e, "could not journal a Telegram update; retrying");
                    tokio::select! {
                        _ = cancel.cancelled() => return false,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        }
    }
}

pub(crate) async fn run(shared: Arc<Shared>, cancel: CancellationToken) {
    let Some(me) = connect(&shared, &cancel).await else {
        return;
    };
    let _ = shared.me.set(me);
    match &shared.settings.mode {
        Mode::Webhook { public_url } => {
            let url = format!("{}{WEBHOOK_PATH}", public_url.trim_end_matches('/'));
            let Ok(url) = url::Url::parse(&url) else {
                tracing::error!("server.public_url does not form a valid webhook URL");
                return;
            };
            let set = shared
                .bot
                .set_webhook(url)
                .secret_token(shared.webhook_secret.clone())
                .allowed_updates(vec![AllowedUpdate::Message, AllowedUpdate::CallbackQuery]);
            match set.await {
                Ok(_) => {
                    shared.channel.ready.store(true, Ordering::Release);
                    tracing::info!("telegram webhook registered");
                }
                Err(e) => {
                    tracing::error!(error = %shared.channel.redact(e.to_string()), "setWebhook failed")
                }
            }
            cancel.cancelled().await;
        }
        Mode::Polling => poll(&shared, &cancel).await,
    }
}

/// getMe (retried until it works) and setMyCommands.
async fn connect(shared: &Shared, cancel: &CancellationToken) -> Option<Me> {
    let mut wait = Duration::from_millis(500);
    let me = loop {
        let result = tokio::select! {
            _ = cancel.cancelled() => return None,
            r = shared.bot.get_me() => r,
        };
        match result {
            Ok(me) => break me,
            Err(e) => {
                tracing::warn!(error = %shared.channel.redact(e.to_string()), "telegram getMe failed; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return None,
                    _ = tokio::time::sleep(wait) => {}
                }
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
    };
    tracing::info!(
        bot = me.user.username.as_deref().unwrap_or_default(),
        "telegram connected"
    );
    let commands: Vec<BotCommand> = shared
        .settings
        .commands
        .iter()
        .map(|c| BotCommand::new(c.name, c.description))
        .collect();
    if let Err(e) = shared.bot.set_my_commands(commands).await {
        tracing::warn!(error = %shared.channel.redact(e.to_string()), "setMyCommands failed");
    }
    Some(me)
}

/// Consecutive failed polls after which the channel reports not ready and the receiver is
/// started again on a new client.
const FAILURES_BEFORE_RESTART: u32 = 3;

/// Why a poll did not complete, in words for the operator (no secret: redacted).
fn poll_trouble(shared: &Shared, e: &RequestError) -> String {
    match e {
        RequestError::Api(ApiError::TerminatedByOtherGetUpdates) => {
            "409 Conflict: another process is polling this bot token (stop it, or use one \
             instance per token)"
                .to_string()
        }
        e => shared.channel.redact(e.to_string()),
    }
}

async fn poll(shared: &Shared, cancel: &CancellationToken) {
    if let Err(e) = shared.bot.delete_webhook().await {
        tracing::warn!(error = %shared.channel.redact(e.to_string()), "deleteWebhook failed");
    }
    let mut poll_bot = shared.poll_bot.clone();
    // Connected and polling: a quiet bot is a healthy bot.
    shared.channel.ready.store(true, Ordering::Release);
    let me = shared.me.get().expect("set before polling").clone();
    let timeout = shared.settings.poll_timeout.as_secs() as u32;
    let liveness = shared.channel.liveness.as_ref();
    // A poll that has not come back by the time the channel counts as down is abandoned.
    let watchdog = liveness.map_or(shared.settings.poll_timeout * 3, |l| l.down_after());
    let mut offset: i32 = 0;
    let mut backoff = Backoff::default();
    loop {
        let request = poll_bot
            .get_updates()
            .offset(offset)
            .timeout(timeout)
            .allowed_updates(vec![AllowedUpdate::Message, AllowedUpdate::CallbackQuery]);
        let result = tokio::select! {
            _ = cancel.cancelled() => break,
            r = tokio::time::timeout(watchdog, request.send()) => r,
        };
        let (why, restart) = match result {
            Ok(Ok(updates)) => {
                backoff.reset();
                shared.channel.ready.store(true, Ordering::Release);
                if let Some(liveness) = liveness {
                    liveness.received();
                    if !updates.is_empty() {
                        liveness.message();
                    }
                }
                for update in updates {
                    if let Some((request, query)) = translate::press(&update) {
                        if !shared.hand_over_press(request, query, cancel).await {
                            return; // cancelled before it was durable: Telegram redelivers it
                        }
                    } else if let Some(message) = shared.wanted(&update, &me)
                        && !shared.hand_over(message, cancel).await
                    {
                        return; // cancelled before it was durable: Telegram redelivers it
                    }
                    // Only now is the update ours to keep: move past it.
                    offset = update.id.0 as i32 + 1;
                }
                continue;
            }
            Ok(Err(RequestError::RetryAfter(seconds))) => {
                // Pacing, not failure.
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(seconds.duration()) => {}
                }
                continue;
            }
            Ok(Err(e)) => {
                let conflict =
                    matches!(e, RequestError::Api(ApiError::TerminatedByOtherGetUpdates));
                let failures = backoff.failed();
                // A conflict is another poller, which a new connection does not cure.
                (
                    poll_trouble(shared, &e),
                    !conflict && failures >= FAILURES_BEFORE_RESTART,
                )
            }
            Err(_) => {
                backoff.failed();
                (
                    format!(
                        "no long poll completed for {} s (connected, no answer)",
                        watchdog.as_secs()
                    ),
                    true,
                )
            }
        };
        tracing::warn!(error = %why, failures = backoff.failures(), "getUpdates failed");
        if let Some(liveness) = liveness {
            // Shown until a poll completes: never retried in silence.
            liveness.trouble(why);
        }
        if backoff.failures() >= FAILURES_BEFORE_RESTART {
            shared.channel.ready.store(false, Ordering::Release);
        }
        if restart && let Some(fresh) = (shared.new_poll_bot)() {
            tracing::warn!("restarting the Telegram receiver on a new connection");
            poll_bot = fresh;
            if let Some(liveness) = liveness {
                liveness.restarted();
            }
        }
        let pause = backoff.delay();
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
    }
    // Confirm what was journalled so Telegram does not send it again after a clean stop.
    if offset > 0 {
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            shared.bot.get_updates().offset(offset).timeout(0).send(),
        )
        .await;
    }
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(WEBHOOK_PATH, post(webhook))
        .with_state(shared)
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"error": message}))).into_response()
}

async fn webhook(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let given = headers
        .get("x-telegram-bot-api-secret-token")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ferroclaw_channel_core::auth::token_matches(given, &shared.webhook_secret) {
        return error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong X-Telegram-Bot-Api-Secret-Token",
        );
    }
    let Some(me) = shared.me.get() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "not connected to Telegram yet",
        );
    };
    let update: Update = match serde_json::from_slice(&body) {
        Ok(update) => update,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("not a Telegram update: {e}"),
            );
        }
    };
    if let Some((request, query)) = translate::press(&update) {
        return match shared.inbox.decide(request).await {
            Ok(outcome) => {
                shared.answer_press(query, &outcome.words()).await;
                StatusCode::OK.into_response()
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not journal a Telegram button press");
                error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "could not store the update; retry",
                )
            }
        };
    }
    if let Some(message) = shared.wanted(&update, me)
        && let Err(e) = shared.inbox.accept(message).await
    {
        tracing::warn!(error = %e, "could not journal a Telegram update");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "could not store the update; retry",
        );
    }
    StatusCode::OK.into_response()
}

//! A status card: a bot message posted once and then edited in place through the outbox
//! (a plan's card, a subagent's status, the coming approval prompts). Its owner keeps the
//! card's id (the outbox id of its first post: in the plan, in the run's row) and hands it
//! back to edit; a platform edits the message that post became.

use super::OutboxNotifier;
use crate::storage::{NewOutbound, OutboxStore, StoreResult};
use ferroclaw_channel_core::{ChatRoute, OutboundKind};
use std::sync::Arc;

#[derive(Clone)]
pub struct StatusCard {
    store: Arc<dyn OutboxStore>,
    notifier: OutboxNotifier,
    /// The session the messages belong to (the outbox orders a conversation's rows).
    session_key: String,
    route: ChatRoute,
    /// The message the card answers (threads and replies refer to it).
    in_reply_to: Option<String>,
    kind: OutboundKind,
}

impl StatusCard {
    pub fn new(
        store: Arc<dyn OutboxStore>,
        notifier: OutboxNotifier,
        session_key: &str,
        route: ChatRoute,
        in_reply_to: Option<String>,
        kind: OutboundKind,
    ) -> Self {
        StatusCard {
            store,
            notifier,
            session_key: session_key.to_string(),
            route,
            in_reply_to,
            kind,
        }
    }

    /// Show `text`: posted when the card was not shown yet (`shown` None), else an edit of
    /// it. Returns the card's id.
    pub async fn show(&self, shown: Option<i64>, text: String) -> StoreResult<i64> {
        let id = self.post(self.message(shown, text)).await?;
        Ok(shown.unwrap_or(id))
    }

    /// A separate message in the card's place (a plan's summary). Returns its outbox id.
    pub async fn post_beside(&self, text: String) -> StoreResult<i64> {
        self.post(self.message(None, text)).await
    }

    /// The edit of card `shown` to `text`, for a caller that commits it with other rows in
    /// one transaction (a run's end).
    pub fn edit(&self, shown: i64, text: String) -> NewOutbound {
        self.message(Some(shown), text)
    }

    fn message(&self, edit_of: Option<i64>, text: String) -> NewOutbound {
        NewOutbound {
            route: self.route.clone(),
            kind: self.kind,
            text,
            in_reply_to: self.in_reply_to.clone(),
            edit_of,
            file: None,
            approval: None,
        }
    }

    async fn post(&self, message: NewOutbound) -> StoreResult<i64> {
        super::post(&*self.store, &self.notifier, &self.session_key, message).await
    }
}

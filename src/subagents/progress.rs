//! A running child's status message, edited as it works (current tool).

use super::texts;
use crate::outbox::OutboxNotifier;
use crate::spawn::{SpawnScope, StepObserver};
use crate::storage::{NewOutbound, Store};
use async_trait::async_trait;
use ferroclaw_channel_core::OutboundKind;
use std::sync::{Arc, Mutex};

pub struct RunProgress {
    store: Arc<dyn Store>,
    outbox: OutboxNotifier,
    scope: SpawnScope,
    label: String,
    status_message: Option<i64>,
    last: Mutex<String>,
}

impl RunProgress {
    pub fn new(
        store: Arc<dyn Store>,
        outbox: OutboxNotifier,
        scope: SpawnScope,
        label: String,
        status_message: Option<i64>,
    ) -> Self {
        RunProgress {
            store,
            outbox,
            scope,
            label,
            status_message,
            last: Mutex::new(String::new()),
        }
    }
}

#[async_trait]
impl StepObserver for RunProgress {
    /// The child is about to run these tools.
    async fn tools(&self, names: &[&str]) {
        let Some(id) = self.status_message else {
            return;
        };
        let text = texts::status(&self.label, &format!("running — {}", names.join(", ")));
        {
            let mut last = self.last.lock().expect("progress lock");
            if *last == text {
                return;
            }
            last.clone_from(&text);
        }
        let edit = NewOutbound {
            route: self.scope.origin.clone(),
            kind: OutboundKind::Status,
            text,
            in_reply_to: self.scope.origin_message.clone(),
            edit_of: Some(id),
        };
        if let Err(e) =
            crate::outbox::post(&*self.store, &self.outbox, &self.scope.parent_session, edit).await
        {
            tracing::warn!(error = %e, "could not update a subagent's status message");
        }
    }
}

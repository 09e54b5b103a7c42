//! Where every inbound message enters: journal it (deduplicated), then queue it on its
//! session's lane. `/stop` does not queue: it ends the session's running turn at once and is
//! answered here. Implements the [`Inbox`] trait the channel adapters call.

use crate::engine::Command;
use crate::lanes::Lanes;
use crate::outbox::OutboxNotifier;
use crate::storage::{JournalEntry, JournalInsert, NewOutbound, Store, StoreError, TurnCommit};
use crate::turn_watch::TurnWatch;
use async_trait::async_trait;
use ferroclaw_channel_core::{Accepted, InboundMessage, Inbox, InboxError, OutboundKind};
use std::sync::Arc;

pub struct Ingress {
    store: Arc<dyn Store>,
    lanes: Lanes,
    outbox: OutboxNotifier,
    turns: TurnWatch,
}

impl Ingress {
    pub fn new(
        store: Arc<dyn Store>,
        lanes: Lanes,
        outbox: OutboxNotifier,
        turns: TurnWatch,
    ) -> Self {
        Ingress {
            store,
            lanes,
            outbox,
            turns,
        }
    }

    /// Queue every journal entry not yet answered whose channel is in `channels`.
    pub async fn recover(&self, channels: &[String]) -> Result<usize, StoreError> {
        let pending = self.store.journal_pending().await?;
        let mut n = 0;
        for entry in pending {
            if channels.contains(&entry.message.route.channel) {
                self.lanes.submit(entry);
                n += 1;
            }
        }
        Ok(n)
    }

    /// `/stop`: cancel the running turn now (queued messages stay queued) and answer.
    async fn stop_now(&self, entry: JournalEntry) -> Result<(), StoreError> {
        let stopped = self.lanes.stop(&entry.session_key);
        let now = crate::clock::now_ms();
        let route = &entry.message.route;
        let session = self
            .store
            .session_get_or_create(&entry.session_key, route, now)
            .await?;
        let text = if stopped {
            "⏹ Stopped the running turn."
        } else {
            "Nothing is running."
        };
        self.store
            .commit_turn(&TurnCommit {
                journal_id: Some(entry.id),
                session_key: entry.session_key.clone(),
                epoch: session.epoch,
                entries: Vec::new(),
                outbound: vec![NewOutbound {
                    route: route.clone(),
                    kind: OutboundKind::Status,
                    text: text.into(),
                    in_reply_to: Some(entry.message.platform_message_id.clone()),
                    edit_of: None,
                }],
                tokens_in: 0,
                tokens_out: 0,
                last_model: None,
                now_ms: now,
            })
            .await?;
        self.outbox.kick(&route.channel);
        self.turns.answered(entry.id);
        Ok(())
    }
}

#[async_trait]
impl Inbox for Ingress {
    async fn accept(&self, message: InboundMessage) -> Result<Accepted, InboxError> {
        let session_key = message.route.session_key();
        let inserted = self
            .store
            .journal_insert(&message, &session_key, crate::clock::now_ms())
            .await
            .map_err(|e| InboxError(e.to_string()))?;
        Ok(match inserted {
            JournalInsert::New(entry) => {
                let journal_id = entry.id;
                if Command::parse(entry.message.text.trim()) == Some(Command::Stop) {
                    // Journalled already: if this fails, the lane answers it after restart.
                    if let Err(err) = self.stop_now(entry).await {
                        tracing::warn!(error = %err, "could not answer /stop");
                    }
                } else {
                    self.lanes.submit(entry);
                }
                Accepted::New {
                    session_key,
                    journal_id,
                }
            }
            JournalInsert::Duplicate { id, session_key } => Accepted::Duplicate {
                session_key,
                journal_id: id,
            },
        })
    }
}

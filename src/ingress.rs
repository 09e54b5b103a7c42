//! Where every inbound message enters: journal it (deduplicated), then queue it on its
//! session's lane. Implements the [`Inbox`] trait the channel adapters call.

use crate::lanes::Lanes;
use crate::storage::{JournalInsert, Store};
use async_trait::async_trait;
use ferroclaw_channel_core::{Accepted, InboundMessage, Inbox, InboxError};
use std::sync::Arc;

pub struct Ingress {
    store: Arc<dyn Store>,
    lanes: Lanes,
}

impl Ingress {
    pub fn new(store: Arc<dyn Store>, lanes: Lanes) -> Self {
        Ingress { store, lanes }
    }

    /// Queue every journal entry not yet answered whose channel is in `channels`.
    pub async fn recover(&self, channels: &[String]) -> Result<usize, crate::storage::StoreError> {
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
                self.lanes.submit(entry);
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

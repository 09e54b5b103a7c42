//! The preview ledger: the platform id of each streamed preview message, kept in the store
//! (as an effect of its turn) until the final reply has replaced it. A turn redone after a
//! crash, here or in another process, then edits the preview the dead attempt left instead
//! of leaving that half-written message beside a second one. Knows no channel: the adapters
//! name their keys (`ferroclaw_channel_core::LiveReplies`).

use crate::storage::Store;
use async_trait::async_trait;
use ferroclaw_channel_core::PreviewLedger;
use std::sync::Arc;

/// The effect's call key (the adapter's key is the turn key).
const CALL: &str = "message";

/// Over the service's store (opened before the channels are built).
pub struct StoreLedger {
    store: Arc<dyn Store>,
}

impl StoreLedger {
    pub fn new(store: Arc<dyn Store>) -> Self {
        StoreLedger { store }
    }
}

#[async_trait]
impl PreviewLedger for StoreLedger {
    async fn recall(&self, key: &str) -> Option<String> {
        self.store
            .tool_effect_get(key, CALL)
            .await
            .inspect_err(|e| tracing::warn!(error = %e, "cannot look up a streamed preview"))
            .ok()
            .flatten()
    }

    async fn remember(&self, key: &str, message_id: &str) {
        if let Err(e) = self
            .store
            .tool_effect_put(key, CALL, message_id, crate::clock::now_ms())
            .await
        {
            tracing::warn!(error = %e, "cannot record a streamed preview");
        }
    }

    async fn forget(&self, key: &str) {
        if let Err(e) = self.store.tool_effect_forget(key, CALL).await {
            tracing::warn!(error = %e, "cannot drop a streamed preview's record");
        }
    }
}

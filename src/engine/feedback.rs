//! The one way the engine reaches a chat while a turn runs: streamed reply text, the typing
//! indicator, and the files that came with the message. Everything else leaves through the
//! outbox. Implemented over the channel adapters by the composition root; the engine holds
//! no channel.

use async_trait::async_trait;
use ferroclaw_channel_core::ChatRoute;

#[async_trait]
pub trait LiveFeedback: Send + Sync {
    /// Whether the chat's channel shows anything live (else the engine skips the work).
    fn live(&self, route: &ChatRoute) -> bool;
    /// A piece of the reply to the inbound message `in_reply_to`, still being generated.
    async fn delta(&self, route: &ChatRoute, in_reply_to: &str, delta: &str);
    /// Show "typing" in the chat and thread.
    async fn typing(&self, route: &ChatRoute);
    /// A file the chat's platform holds (an attachment's platform id).
    async fn fetch_file(
        &self,
        _route: &ChatRoute,
        _id: &str,
        _max_bytes: u64,
    ) -> Result<Vec<u8>, ferroclaw_channel_core::FetchError> {
        Err(ferroclaw_channel_core::FetchError::Failed(
            "no channel holds this file".into(),
        ))
    }
}

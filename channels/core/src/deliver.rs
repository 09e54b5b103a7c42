//! How a chat adapter delivers a text bot message, written once for every platform: split at
//! the platform's limit (the adapter splits, it knows its markup), edit the message an edit
//! addresses, let the first piece of a streamed reply replace its live preview (here or one a
//! crashed attempt left), send the remaining pieces, and remember what a failed attempt sent
//! so a retry sends only the rest.
//!
//! An adapter implements [`PieceSender`] (send one piece, edit one message) over its own
//! client; this module knows no platform type.

use crate::{Delivered, DeliveryError, LiveReplies, OutboundKind, OutboundMessage, SentPieces};
use async_trait::async_trait;
use std::time::Duration;

/// Why an edit failed.
#[derive(Debug)]
pub enum EditError {
    /// The message is gone (deleted in the chat): a streamed preview is then replaced by a
    /// fresh message instead.
    Gone(DeliveryError),
    /// Any other failure, acted on like a failed send.
    Failed(DeliveryError),
}

impl EditError {
    fn into_delivery(self) -> DeliveryError {
        match self {
            EditError::Gone(e) | EditError::Failed(e) => e,
        }
    }
}

/// One platform's two text operations.
#[async_trait]
pub trait PieceSender: Send + Sync {
    /// The platform's message id.
    type Id: Clone + Send + Sync + ToString;
    /// Where the pieces of one message go (a chat id, a resolved channel).
    type Target: Send + Sync;

    /// A stored platform id as the platform's type.
    fn parse_id(&self, id: &str) -> Result<Self::Id, DeliveryError>;
    /// Replace the text of message `id`.
    async fn edit_piece(
        &self,
        target: &Self::Target,
        id: &Self::Id,
        text: &str,
    ) -> Result<(), EditError>;
    /// Send one piece of `message`; `first` is true for the first piece sent of it (a reply
    /// reference goes there).
    async fn send_piece(
        &self,
        target: &Self::Target,
        message: &OutboundMessage,
        piece: &str,
        first: bool,
    ) -> Result<Self::Id, DeliveryError>;
}

/// What a chat adapter keeps for delivering text: its streamed replies, the pieces failed
/// attempts sent, and the pace of edits.
pub struct TextDelivery<Id> {
    pub streams: LiveReplies,
    pub partial: SentPieces<Id>,
    /// At most one edit of a streamed message per interval.
    pub edit_interval: Duration,
}

impl<Id: Clone + Send + Sync + ToString> TextDelivery<Id> {
    pub fn new(streams: LiveReplies, edit_interval: Duration) -> Self {
        TextDelivery {
            streams,
            partial: SentPieces::default(),
            edit_interval,
        }
    }

    /// Deliver `message` as `pieces` through `sender` to `target`. `stream_key` names the
    /// chat the message's live preview was streamed in (as the adapter's `stream_delta`
    /// named it).
    pub async fn deliver<S: PieceSender<Id = Id> + ?Sized>(
        &self,
        sender: &S,
        target: &S::Target,
        stream_key: &str,
        message: &OutboundMessage,
        pieces: &[String],
    ) -> Result<Delivered, DeliveryError> {
        if pieces.is_empty() {
            return Ok(Delivered::default());
        }
        // An edit of an earlier message (plan cards, status messages).
        if let Some(edited) = message.edit_platform_id.as_deref() {
            let edited = sender.parse_id(edited)?;
            sender
                .edit_piece(target, &edited, &pieces[0])
                .await
                .map_err(EditError::into_delivery)?;
            return Ok(Delivered {
                platform_message_id: Some(edited.to_string()),
            });
        }
        let mut sent = self.partial.take(message.id);
        // A reply that was streamed (here, or by an attempt before a crash): its first piece
        // replaces the streamed message.
        let mut streamed = None;
        if sent.is_empty()
            && message.kind == OutboundKind::Reply
            && let Some(reply_to) = &message.in_reply_to
            && let Some((shown, edit)) = self
                .streams
                .settle_final(stream_key, reply_to, &pieces[0], self.edit_interval)
                .await
        {
            streamed = Some(reply_to);
            if let Ok(shown) = sender.parse_id(&shown) {
                let kept = !edit
                    || match sender.edit_piece(target, &shown, &pieces[0]).await {
                        Ok(()) => true,
                        // The preview was deleted in the chat: the reply is sent fresh.
                        Err(EditError::Gone(_)) => false,
                        Err(EditError::Failed(e)) => return Err(e),
                    };
                if kept {
                    sent.push(shown);
                }
            }
        }
        for piece in &pieces[sent.len().min(pieces.len())..] {
            match sender
                .send_piece(target, message, piece, sent.is_empty())
                .await
            {
                Ok(id) => sent.push(id),
                Err(e) => {
                    self.partial.keep(message.id, sent);
                    return Err(e);
                }
            }
        }
        if let Some(reply_to) = streamed {
            self.streams.finished(stream_key, reply_to).await;
        }
        Ok(Delivered {
            platform_message_id: sent.first().map(ToString::to_string),
        })
    }
}

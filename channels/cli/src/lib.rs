//! The terminal channel (`ferroclaw chat`): replies are printed to a writer (stdout), and
//! reply deltas are printed as they stream in. Reading stdin lives in the `chat` command;
//! this crate only knows how to show bot messages.

use async_trait::async_trait;
use ferroclaw_channel_core::{
    Channel, ChatRoute, Delivered, DeliveryError, OutboundKind, OutboundMessage,
};
use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;

/// The channel name used in routes and session keys.
pub const CLI_CHANNEL: &str = "cli";

pub struct CliChannel {
    state: Mutex<State>,
}

struct State {
    out: Box<dyn Write + Send>,
    /// Text already printed as deltas, by the inbound id it answers.
    streamed: HashMap<String, String>,
    /// Lines of each card printed so far (by the outbox id of the card), so an edit prints
    /// only the lines that changed.
    cards: HashMap<i64, Vec<String>>,
}

impl CliChannel {
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        CliChannel {
            state: Mutex::new(State {
                out,
                streamed: HashMap::new(),
                cards: HashMap::new(),
            }),
        }
    }

    pub fn stdout() -> Self {
        Self::new(Box::new(std::io::stdout()))
    }
}

fn io_retry(err: std::io::Error) -> DeliveryError {
    DeliveryError::Retry {
        reason: format!("terminal write failed: {err}"),
        retry_after: None,
    }
}

#[async_trait]
impl Channel for CliChannel {
    fn name(&self) -> &str {
        CLI_CHANNEL
    }

    async fn deliver(&self, message: &OutboundMessage) -> Result<Delivered, DeliveryError> {
        let mut state = self.state.lock().expect("cli output lock");
        // A reply whose text was already printed as deltas only needs its line ended.
        let was_streamed = message.kind == OutboundKind::Reply
            && !message.text.is_empty()
            && message.in_reply_to.as_ref().is_some_and(|id| {
                state
                    .streamed
                    .get(id)
                    .is_some_and(|printed| printed.contains(&message.text))
            });
        if was_streamed && let Some(id) = &message.in_reply_to {
            state.streamed.remove(id);
        }
        let text = if was_streamed {
            "\n".to_string()
        } else if let Some(original) = message.edit_of {
            // An edited card: reprint the lines that changed.
            let lines: Vec<String> = message.text.lines().map(str::to_string).collect();
            let before = state
                .cards
                .insert(original, lines.clone())
                .unwrap_or_default();
            let changed: Vec<&String> = lines
                .iter()
                .enumerate()
                .filter(|(i, l)| before.get(*i) != Some(*l))
                .map(|(_, l)| l)
                .collect();
            changed.iter().map(|l| format!("{l}\n")).collect()
        } else {
            if message.kind == OutboundKind::Plan {
                state.cards.insert(
                    message.id,
                    message.text.lines().map(str::to_string).collect(),
                );
            }
            match message.kind {
                OutboundKind::Error => format!("! {}\n", message.text),
                _ => format!("{}\n", message.text),
            }
        };
        state.out.write_all(text.as_bytes()).map_err(io_retry)?;
        state.out.flush().map_err(io_retry)?;
        Ok(Delivered {
            platform_message_id: Some(message.id.to_string()),
        })
    }

    async fn stream_delta(&self, _route: &ChatRoute, in_reply_to: &str, delta: &str) {
        let mut state = self.state.lock().expect("cli output lock");
        state
            .streamed
            .entry(in_reply_to.to_string())
            .or_default()
            .push_str(delta);
        let _ = state.out.write_all(delta.as_bytes());
        let _ = state.out.flush();
    }
}

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
    /// Other messages that arrived while a reply was being printed as it streams: shown
    /// after it, so the reply's text is never cut by a card line.
    held: String,
    /// Approval requests shown and not yet answered at the `[y/a/n]` prompt, oldest first.
    asking: std::collections::VecDeque<String>,
}

impl CliChannel {
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        CliChannel {
            state: Mutex::new(State {
                out,
                streamed: HashMap::new(),
                cards: HashMap::new(),
                held: String::new(),
                asking: std::collections::VecDeque::new(),
            }),
        }
    }

    pub fn stdout() -> Self {
        Self::new(Box::new(std::io::stdout()))
    }

    /// The oldest approval request still waiting for an answer at the prompt, taken: the
    /// `chat` command turns the next `y`, `a` or `n` line into its decision.
    pub fn take_question(&self) -> Option<String> {
        self.state
            .lock()
            .expect("cli output lock")
            .asking
            .pop_front()
    }

    /// Whether an approval request waits for an answer at the prompt.
    pub fn asking(&self) -> bool {
        !self
            .state
            .lock()
            .expect("cli output lock")
            .asking
            .is_empty()
    }

    /// Print one line of the terminal's own (an answer to the prompt). While a reply is being
    /// streamed it is held, as a delivered message is, and printed after that reply's line:
    /// a decision lets the turn go on at once, and its streamed answer may already be under
    /// way (printed in between, the line split the answer in two).
    pub fn note(&self, line: &str) {
        let mut state = self.state.lock().expect("cli output lock");
        if !state.streamed.is_empty() {
            state.held.push_str(line);
            state.held.push('\n');
            return;
        }
        let _ = writeln!(state.out, "{line}");
        let _ = state.out.flush();
    }

    /// Print what is still held (a stream that never got its reply); at exit.
    pub fn flush_held(&self) {
        let mut state = self.state.lock().expect("cli output lock");
        let held = std::mem::take(&mut state.held);
        if !held.is_empty() {
            let _ = state.out.write_all(held.as_bytes());
            let _ = state.out.flush();
        }
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
            match (&message.approval, message.kind) {
                (Some(prompt), _) => {
                    state.asking.push_back(prompt.id.clone());
                    format!(
                        "{}\nApprove `{}`? [y] once, [a] always here, [n] no: ",
                        message.text, prompt.tool
                    )
                }
                (None, OutboundKind::Error) => format!("! {}\n", message.text),
                (None, _) => format!("{}\n", message.text),
            }
        };
        // The message that ends a stream (its reply, or an error in its place) is written
        // now, followed by whatever was held while the stream was being printed. Others wait
        // while a stream is open.
        let ends_stream = message
            .in_reply_to
            .as_ref()
            .is_some_and(|id| state.streamed.contains_key(id))
            && matches!(message.kind, OutboundKind::Reply | OutboundKind::Error);
        if ends_stream && let Some(id) = &message.in_reply_to {
            state.streamed.remove(id);
        }
        let text = if was_streamed || ends_stream || state.streamed.is_empty() {
            let held = std::mem::take(&mut state.held);
            format!("{text}{held}")
        } else {
            state.held.push_str(&text);
            String::new()
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

#[cfg(test)]
mod tests {
    use super::*;
    use ferroclaw_channel_core::ChatKind;
    use std::sync::Arc;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn message(id: i64, kind: OutboundKind, text: &str, in_reply_to: &str) -> OutboundMessage {
        OutboundMessage {
            id,
            route: ChatRoute {
                channel: CLI_CHANNEL.into(),
                kind: ChatKind::Conversation,
                chat_id: "c".into(),
                thread_id: None,
            },
            kind,
            text: text.into(),
            in_reply_to: Some(in_reply_to.into()),
            edit_of: None,
            edit_platform_id: None,
            file: None,
            approval: None,
        }
    }

    #[tokio::test]
    async fn a_card_arriving_mid_stream_is_printed_after_the_streamed_reply() {
        let out = Shared::default();
        let cli = CliChannel::new(Box::new(out.clone()));
        let route = message(0, OutboundKind::Reply, "", "m1").route;
        cli.stream_delta(&route, "m1", "Step 2 fai").await;
        cli.deliver(&message(1, OutboundKind::Plan, "📋 card", "m1"))
            .await
            .unwrap();
        cli.stream_delta(&route, "m1", "led; continue?").await;
        cli.deliver(&message(
            2,
            OutboundKind::Reply,
            "Step 2 failed; continue?",
            "m1",
        ))
        .await
        .unwrap();
        let printed = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(printed, "Step 2 failed; continue?\n📋 card\n");
    }

    #[tokio::test]
    async fn the_terminal_s_own_line_waits_for_a_streamed_reply_to_end() {
        let out = Shared::default();
        let cli = CliChannel::new(Box::new(out.clone()));
        cli.note("✅ Approved.");
        let route = message(0, OutboundKind::Reply, "", "m1").route;
        cli.stream_delta(&route, "m1", "Error: denied t").await;
        cli.note("🚫 Denied.");
        cli.stream_delta(&route, "m1", "his call").await;
        cli.deliver(&message(
            1,
            OutboundKind::Reply,
            "Error: denied this call",
            "m1",
        ))
        .await
        .unwrap();
        cli.note("no stream open: at once");
        let printed = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            printed,
            "✅ Approved.\nError: denied this call\n🚫 Denied.\nno stream open: at once\n"
        );
    }
}

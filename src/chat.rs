//! `ferroclaw chat`: the terminal channel driven by stdin, one line per message.
//!
//! Uses the same [`App`] as `serve`. At end of input it waits for queued turns, flushes the
//! outbox and exits.

use crate::app::App;
use crate::config::LoadedConfig;
use ferroclaw_channel_cli::{CLI_CHANNEL, CliChannel};
use ferroclaw_channel_core::{
    ChatKind, ChatRoute, Decision, DecisionRequest, InboundMessage, Inbox, Sender,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

pub async fn run(loaded: &LoadedConfig, session: &str) -> anyhow::Result<()> {
    // A model fetched on first use shows a progress bar here (log lines in `serve`).
    crate::models::progress::prefer_bar();
    let terminal = Arc::new(CliChannel::stdout());
    let app = App::build(loaded, vec![terminal.clone()], Vec::new()).await?;
    let route = ChatRoute {
        channel: CLI_CHANNEL.into(),
        kind: ChatKind::Conversation,
        chat_id: session.to_string(),
        thread_id: None,
    };
    let recovered = app.recover().await?;
    if recovered > 0 {
        tracing::info!(recovered, "answering messages left from an earlier run");
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "local".into());
    let sender = Sender {
        id: user.clone(),
        name: user.clone(),
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        // An answer at the approval prompt decides the oldest request shown.
        if let Some(decision) = answer(&line)
            && let Some(id) = terminal.take_question()
        {
            decide(&app, &terminal, &sender, id, decision).await?;
            continue;
        }
        let message = InboundMessage {
            route: route.clone(),
            sender: sender.clone(),
            platform_message_id: uuid::Uuid::new_v4().to_string(),
            text: line,
            mentioned: true,
            reply_to: None,
            internal: false,
            attachments: Vec::new(),
            mention_names: Vec::new(),
        };
        app.ingress.accept(message).await?;
    }
    // At the end of input no one is left to answer a prompt: what still asks is denied.
    let quiet = app.wait_quiet();
    tokio::pin!(quiet);
    loop {
        tokio::select! {
            _ = &mut quiet => break,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                while let Some(id) = terminal.take_question() {
                    decide(&app, &terminal, &sender, id, Decision::Deny).await?;
                }
            }
        }
    }
    app.flush_outbox().await;
    terminal.flush_held();
    app.shutdown(Duration::from_secs(
        loaded.config.server.shutdown_grace_secs,
    ))
    .await;
    Ok(())
}

/// A line that answers the approval prompt.
fn answer(line: &str) -> Option<Decision> {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Some(Decision::Approve),
        "a" | "always" => Some(Decision::Always),
        "n" | "no" => Some(Decision::Deny),
        _ => None,
    }
}

/// Carry out the terminal user's decision on request `id` and print what became of it.
async fn decide(
    app: &App,
    terminal: &CliChannel,
    sender: &Sender,
    id: String,
    decision: Decision,
) -> anyhow::Result<()> {
    let request = DecisionRequest {
        channel: CLI_CHANNEL.into(),
        platform_id: format!("answer:{id}"),
        approval_id: id,
        decision,
        sender: sender.clone(),
    };
    let outcome = app.ingress.decide(request).await?;
    terminal.note(&outcome.words());
    Ok(())
}

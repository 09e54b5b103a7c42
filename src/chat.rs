//! `ferroclaw chat`: the terminal channel driven by stdin, one line per message.
//!
//! Uses the same [`App`] as `serve`. At end of input it waits for queued turns, flushes the
//! outbox and exits.

use crate::app::App;
use crate::config::LoadedConfig;
use ferroclaw_channel_cli::{CLI_CHANNEL, CliChannel};
use ferroclaw_channel_core::{ChatKind, ChatRoute, InboundMessage, Inbox, Sender};
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
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let message = InboundMessage {
            route: route.clone(),
            sender: Sender {
                id: user.clone(),
                name: user.clone(),
            },
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
    app.wait_quiet().await;
    app.flush_outbox().await;
    terminal.flush_held();
    app.shutdown(Duration::from_secs(
        loaded.config.server.shutdown_grace_secs,
    ))
    .await;
    Ok(())
}

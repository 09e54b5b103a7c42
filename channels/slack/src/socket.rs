//! Socket Mode: a websocket URL from `apps.connections.open` (the app-level token), a
//! `hello`, then envelopes — each acknowledged with its `envelope_id` only once its payload
//! is journalled (an unacknowledged one is redelivered by Slack). A `disconnect` (a refresh,
//! or a warning before one) opens the next connection first and closes the old one after,
//! so nothing is missed in between; a dropped connection is opened again with backoff and
//! jitter. The connection is pinged every `ping_interval_secs`: one that has sent nothing
//! (not even a pong) for three of them is down, and is dropped for a new one.

use crate::channel::SlackChannel;
use crate::ingress::{Ingress, PayloadKind};
use ferroclaw_channel_core::backoff::Backoff;
use futures::{SinkExt, StreamExt};
use secrecy::SecretString;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long a new connection may take to say `hello`.
const HELLO: Duration = Duration::from_secs(10);

pub struct SocketMode {
    pub ingress: Arc<Ingress>,
    pub channel: Arc<SlackChannel>,
    pub app_token: SecretString,
    pub shutdown: CancellationToken,
    /// How often the open connection is pinged (any frame back counts as alive).
    pub ping_every: Duration,
}

/// How one connection ended.
enum Ended {
    /// Slack asked for a refresh and the next connection is open.
    Refreshed(Box<Socket>),
    Dropped(String),
    Shutdown,
}

impl SocketMode {
    pub async fn run(self) {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let mut next: Option<Socket> = None;
        loop {
            let socket = match next.take() {
                Some(socket) => socket,
                None => {
                    let opened = tokio::select! {
                        _ = self.shutdown.cancelled() => return,
                        opened = self.open() => opened,
                    };
                    match opened {
                        Ok(socket) => socket,
                        Err(why) => {
                            tracing::warn!(error = %why, "Slack Socket Mode connection failed; retrying");
                            self.trouble(why);
                            if self.pause(&mut backoff).await {
                                return;
                            }
                            continue;
                        }
                    }
                }
            };
            self.channel.set_ready(true);
            if let Some(liveness) = &self.channel.liveness {
                liveness.received();
            }
            backoff.reset();
            match self.serve(socket).await {
                Ended::Refreshed(socket) => next = Some(*socket),
                Ended::Shutdown => {
                    self.channel.set_ready(false);
                    return;
                }
                Ended::Dropped(why) => {
                    self.channel.set_ready(false);
                    tracing::warn!(error = %why, "Slack Socket Mode connection dropped; reconnecting");
                    self.trouble(why);
                    if self.pause(&mut backoff).await {
                        return;
                    }
                }
            }
        }
    }

    fn trouble(&self, why: String) {
        if let Some(liveness) = &self.channel.liveness {
            liveness.trouble(why);
        }
    }

    /// Wait out the backoff (longer each time, with jitter); true when shutting down.
    async fn pause(&self, backoff: &mut Backoff) -> bool {
        backoff.failed();
        let wait = backoff.delay();
        tokio::select! {
            _ = self.shutdown.cancelled() => true,
            _ = tokio::time::sleep(wait) => false,
        }
    }

    /// A new connection that has said `hello`.
    async fn open(&self) -> Result<Socket, String> {
        let answer = self
            .ingress
            .api
            .call_form("apps.connections.open", Some(&self.app_token), &[])
            .await
            .map_err(|e| format!("apps.connections.open: {e}"))?;
        let url = answer["url"]
            .as_str()
            .ok_or("apps.connections.open gave no url")?;
        let (mut socket, _) = tokio_tungstenite::connect_async(url)
            .await
            .map_err(|e| format!("websocket: {e}"))?;
        let hello = tokio::time::timeout(HELLO, async {
            while let Some(frame) = socket.next().await {
                if let Ok(Message::Text(text)) = frame
                    && serde_json::from_str::<Value>(&text).is_ok_and(|v| v["type"] == "hello")
                {
                    return true;
                }
            }
            false
        })
        .await;
        match hello {
            Ok(true) => Ok(socket),
            Ok(false) => Err("the connection closed before hello".into()),
            Err(_) => Err("no hello within 10 s".into()),
        }
    }

    async fn serve(&self, mut socket: Socket) -> Ended {
        let mut ping = tokio::time::interval(self.ping_every);
        ping.tick().await;
        let liveness = self.channel.liveness.as_ref();
        loop {
            let frame = tokio::select! {
                _ = self.shutdown.cancelled() => {
                    let _ = socket.close(None).await;
                    return Ended::Shutdown;
                }
                _ = ping.tick() => {
                    if let Some(liveness) = liveness
                        && liveness.silent_for() > liveness.down_after()
                    {
                        liveness.restarted();
                        return Ended::Dropped(format!(
                            "nothing from Slack for {} s (not even a pong); opening a new connection",
                            liveness.silent_for().as_secs()
                        ));
                    }
                    // Sent without waiting on a stuck peer for long.
                    let sent = tokio::time::timeout(
                        Duration::from_secs(5),
                        socket.send(Message::Ping(Vec::new().into())),
                    )
                    .await;
                    if let Ok(Err(e)) = sent {
                        return Ended::Dropped(format!("ping failed: {e}"));
                    }
                    continue;
                }
                frame = socket.next() => frame,
            };
            if let (Some(liveness), Some(Ok(_))) = (liveness, &frame) {
                liveness.received();
            }
            let text = match frame {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Close(_))) | None => return Ended::Dropped("closed".into()),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Ended::Dropped(e.to_string()),
            };
            let Ok(envelope) = serde_json::from_str::<Value>(&text) else {
                tracing::warn!("Slack sent a frame that is not JSON; ignored");
                continue;
            };
            if envelope["type"] == "disconnect" {
                tracing::info!(
                    reason = envelope["reason"].as_str().unwrap_or_default(),
                    "Slack asked to reconnect; opening the next connection first"
                );
                return match self.open().await {
                    Ok(next) => {
                        let _ = socket.close(None).await;
                        Ended::Refreshed(Box::new(next))
                    }
                    Err(why) => Ended::Dropped(why),
                };
            }
            let Some(id) = envelope["envelope_id"].as_str() else {
                continue;
            };
            let kind = match envelope["type"].as_str() {
                Some("events_api") => PayloadKind::Event,
                Some("slash_commands") => PayloadKind::SlashCommand,
                Some("interactive") => PayloadKind::Interactive,
                _ => {
                    // Unknown envelopes are acknowledged: nothing will handle them later.
                    let _ = ack(&mut socket, id).await;
                    continue;
                }
            };
            if let Some(liveness) = liveness {
                liveness.message();
            }
            match self.ingress.handle(kind, &envelope["payload"]).await {
                Ok(()) => {
                    if let Err(e) = ack(&mut socket, id).await {
                        return Ended::Dropped(format!("ack failed: {e}"));
                    }
                }
                // Not acknowledged: Slack delivers it again.
                Err(why) => {
                    tracing::warn!(error = %why, "Slack envelope not journalled; left for redelivery")
                }
            }
        }
    }
}

async fn ack(socket: &mut Socket, envelope_id: &str) -> Result<(), String> {
    socket
        .send(Message::Text(
            json!({"envelope_id": envelope_id}).to_string().into(),
        ))
        .await
        .map_err(|e| e.to_string())
}

//! The real [`App`] in-process with a recording channel: for engine tests that need to see
//! every delivered message and streamed delta (the LLM is still a real HTTP stand-in).

use async_trait::async_trait;
use ferroclaw::app::App;
use ferroclaw::config;
use ferroclaw_channel_core::{
    Channel, ChatKind, ChatRoute, Delivered, DeliveryError, InboundMessage, Inbox, OutboundMessage,
    Sender,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const CHANNEL: &str = "rec";

#[derive(Default)]
pub struct Recorder {
    pub delivered: Mutex<Vec<OutboundMessage>>,
    pub deltas: Mutex<Vec<String>>,
}

#[async_trait]
impl Channel for Recorder {
    fn name(&self) -> &str {
        CHANNEL
    }
    async fn deliver(&self, message: &OutboundMessage) -> Result<Delivered, DeliveryError> {
        self.delivered.lock().unwrap().push(message.clone());
        Ok(Delivered {
            platform_message_id: Some(format!("p{}", message.id)),
        })
    }
    async fn stream_delta(&self, _route: &ChatRoute, _in_reply_to: &str, delta: &str) {
        self.deltas.lock().unwrap().push(delta.to_string());
    }
}

pub struct InProc {
    pub app: App,
    pub recorder: Arc<Recorder>,
    pub dir: tempfile::TempDir,
    next: Mutex<u64>,
}

impl InProc {
    /// Start the app from `config_toml` (storage and workspace are put in a temp folder).
    pub async fn start(config_toml: &str) -> InProc {
        Self::start_in(tempfile::tempdir().unwrap(), config_toml).await
    }

    async fn start_in(dir: tempfile::TempDir, config_toml: &str) -> InProc {
        let full = format!("{config_toml}\n",).replace("%DIR%", &dir.path().display().to_string());
        let path = dir.path().join("config.toml");
        std::fs::write(&path, full).unwrap();
        let mut loaded =
            config::load(&path, true, &ferroclaw::app::known()).unwrap_or_else(|e| panic!("{e}"));
        loaded.config.storage.url = format!("sqlite://{}", dir.path().join("t.db").display());
        loaded.config.agent.workspace = dir.path().join("ws").display().to_string();
        let recorder = Arc::new(Recorder::default());
        let app = App::build(&loaded, vec![recorder.clone()], Vec::new())
            .await
            .unwrap();
        InProc {
            app,
            recorder,
            dir,
            next: Mutex::new(0),
        }
    }

    /// Stop this app (as a restart would) and start a new one on the same folder and database.
    pub async fn restart(self, config_toml: &str) -> InProc {
        self.app.shutdown(Duration::from_secs(1)).await;
        let InProc { dir, next, .. } = self;
        let started = Self::start_in(dir, config_toml).await;
        *started.next.lock().unwrap() = *next.lock().unwrap();
        started
    }

    pub fn route(conversation: &str) -> ChatRoute {
        ChatRoute {
            channel: CHANNEL.into(),
            kind: ChatKind::Conversation,
            chat_id: conversation.into(),
            thread_id: None,
        }
    }

    /// Send `text` into `conversation`.
    pub async fn say(&self, conversation: &str, text: &str) {
        let id = {
            let mut next = self.next.lock().unwrap();
            *next += 1;
            *next
        };
        self.app
            .ingress
            .accept(InboundMessage {
                route: Self::route(conversation),
                sender: Sender {
                    id: "u1".into(),
                    name: "U".into(),
                },
                platform_message_id: format!("m{id}"),
                text: text.into(),
                mentioned: true,
                reply_to: None,
                internal: false,
                attachments: Vec::new(),
                mention_names: Vec::new(),
            })
            .await
            .unwrap();
    }

    /// The stored session row of `conversation`.
    pub async fn session(&self, conversation: &str) -> ferroclaw::storage::SessionRow {
        let key = Self::route(conversation).session_key();
        self.app
            .store
            .session_get(&key)
            .await
            .unwrap()
            .expect("the session exists")
    }

    pub fn delivered(&self) -> Vec<OutboundMessage> {
        self.recorder.delivered.lock().unwrap().clone()
    }

    /// Approve the `n`th approval prompt delivered (waiting for it) as the sender of `say`.
    pub async fn approve(&self, conversation: &str, n: usize) {
        let id = super::wait_for("an approval prompt", Duration::from_secs(20), || async {
            self.delivered()
                .iter()
                .filter_map(|m| m.approval.as_ref())
                .nth(n - 1)
                .map(|a| a.id.clone())
        })
        .await;
        self.say(conversation, &format!("/approve {id}")).await;
    }

    /// The text of the `n`th reply delivered (waiting for it); prompts, edits and status
    /// lines are not replies.
    pub async fn reply(&self, n: usize) -> String {
        super::wait_for("a reply", Duration::from_secs(30), || async {
            self.delivered()
                .iter()
                .filter(|m| {
                    m.kind == ferroclaw_channel_core::OutboundKind::Reply && m.edit_of.is_none()
                })
                .nth(n - 1)
                .map(|m| m.text.clone())
        })
        .await
    }

    /// Wait (at most `within`) until a message with exactly `text` was delivered.
    pub async fn wait_text(&self, text: &str, within: Duration) {
        super::wait_for(&format!("the reply `{text}`"), within, || async {
            self.delivered()
                .iter()
                .any(|m| m.text == text)
                .then_some(())
        })
        .await
    }

    /// Wait until at least `n` messages were delivered; returns them.
    pub async fn wait_delivered(&self, n: usize) -> Vec<OutboundMessage> {
        super::wait_for(
            &format!("{n} delivered messages"),
            Duration::from_secs(20),
            || async {
                let d = self.delivered();
                (d.len() >= n).then_some(d)
            },
        )
        .await
    }
}

/// A config with the stand-in as provider `standin`, model `standin/m`, plus `extra`.
pub fn config(llm_url: &str, extra_agent: &str, extra: &str) -> String {
    format!(
        "[agent]\nmodel = \"standin/m\"\n{extra_agent}\n[providers.standin]\nkind = \"openai\"\nbase_url = \"{llm_url}\"\n\
         [fallback]\nretries_per_model = 0\nrequest_timeout_secs = 30\n{extra}\n"
    )
}

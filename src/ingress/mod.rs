//! Where every inbound message enters: journal it (deduplicated), then queue it on its
//! session's lane. Strangers are refused here (`crate::ingress::access`), before any lane. `/stop`
//! does not queue: it ends the session's running turn at once and is answered here.
//! Implements the [`Inbox`] trait the channel adapters call.

pub mod access;
pub mod pairing;

use crate::commands::Command;
use crate::ingress::access::{Access, Verdict, pairing_text};
use crate::lanes::TurnHandler;
use crate::lanes::{EntryGate, Lanes};
use crate::storage::{JournalEntry, JournalInsert, Store, StoreError};
use async_trait::async_trait;
use ferroclaw_channel_core::{
    Accepted, Decision, DecisionOutcome, DecisionRequest, InboundMessage, Inbox, InboxError,
    OutboundKind,
};
use std::sync::Arc;

pub struct Ingress {
    store: Arc<dyn Store>,
    lanes: Lanes,
    /// Which entries run as turns (the lanes ask the same one about entries they take over).
    admission: Arc<Admission>,
    /// Bindings: which agent answers a route.
    agents: Arc<crate::agents::Agents>,
}

/// Whether a journal entry goes to its lane: strangers are refused (or given a pairing
/// code) and `/stop` is carried out at once, each answered here. Built before the lanes,
/// which ask it about entries they take over from another process.
pub struct Admission {
    store: Arc<dyn Store>,
    handler: Arc<TurnHandler>,
    access: Access,
    /// Other processes on the same database (PostgreSQL): told about `/stop`.
    signals: Option<crate::signals::Signals>,
    /// Tool calls waiting for a person: `/approve` and `/deny` decide them here, since the
    /// session's lane is the one waiting.
    approvals: Arc<crate::approvals::Approvals>,
}

impl Admission {
    /// Carry out `/stop` for `session` in this process: end its chain of turns, cancel its
    /// running turn, kill its subagents. Returns whether a turn was running and how many
    /// subagents were killed. (A `/stop` another process journalled arrives as a signal and
    /// is carried out here too.)
    pub fn stop_here(&self, session: &str, lanes: &Lanes) -> (bool, usize) {
        self.handler.stop_chain(session);
        let stopped = lanes.stop(session);
        let killed = self.handler.kill_subagents(session);
        (stopped, killed)
    }

    pub fn new(
        store: Arc<dyn Store>,
        handler: Arc<TurnHandler>,
        access: Access,
        signals: Option<crate::signals::Signals>,
        approvals: Arc<crate::approvals::Approvals>,
    ) -> Self {
        Admission {
            store,
            handler,
            access,
            signals,
            approvals,
        }
    }

    /// `/approve <id> [always]` or `/deny <id>` from a person: carried out at once and
    /// answered with what became of it. None for any other text.
    async fn decision(&self, entry: &JournalEntry) -> Option<Result<String, StoreError>> {
        if entry.message.internal {
            return None;
        }
        let Some(Command::Feature { name, args }) = Command::parse(entry.message.text.trim())
        else {
            return None;
        };
        let mut words = args.split_whitespace();
        let (id, decision) = match (name.as_str(), words.next(), words.next()) {
            ("approve", Some(id), None) => (id, Decision::Approve),
            ("approve", Some(id), Some("always")) => (id, Decision::Always),
            ("deny", Some(id), None) => (id, Decision::Deny),
            ("approve" | "deny", ..) => {
                return Some(Ok(
                    "Usage: /approve <id> [always], or /deny <id>".to_string()
                ));
            }
            _ => return None,
        };
        let person = format!(
            "{}:{}",
            entry.message.route.channel, entry.message.sender.id
        );
        Some(
            self.approvals
                .decide(id, decision, &person, None)
                .await
                .map(|outcome| outcome.words()),
        )
    }
}

impl Ingress {
    pub fn new(
        store: Arc<dyn Store>,
        lanes: Lanes,
        admission: Arc<Admission>,
        agents: Arc<crate::agents::Agents>,
    ) -> Self {
        Ingress {
            store,
            lanes,
            admission,
            agents,
        }
    }

    /// Dispatch every journal entry not yet answered whose channel is in `channels`.
    pub async fn recover(&self, channels: &[String]) -> Result<usize, StoreError> {
        let pending = self.store.journal_pending().await?;
        let mut n = 0;
        for mut entry in pending {
            if channels.contains(&entry.message.route.channel) {
                entry.redo = true; // it may have been running when the last process ended
                self.dispatch(entry).await?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Route a newly journalled entry: refuse strangers, run `/stop` at once, queue the rest.
    async fn dispatch(&self, entry: JournalEntry) -> Result<(), StoreError> {
        if self.admission.admit(&entry, &self.lanes).await? {
            self.lanes.submit(entry);
        }
        Ok(())
    }
}

/// Entries a lane takes over from another process (or a dead one) pass the same gate.
#[async_trait]
impl crate::lanes::EntryGate for Admission {
    async fn admit(&self, entry: &JournalEntry, lanes: &Lanes) -> Result<bool, StoreError> {
        let verdict = if entry.message.internal {
            Verdict::Allow
        } else {
            self.access.check(&*self.store, &entry.message).await?
        };
        match verdict {
            Verdict::Allow => {}
            Verdict::Deny => {
                tracing::info!(channel = %entry.message.route.channel, "message from a user without access dropped");
                self.handler.answer(entry, None).await?;
                return Ok(false);
            }
            Verdict::Pair(code) => {
                tracing::info!(channel = %entry.message.route.channel, "pairing code issued");
                self.handler
                    .answer(entry, Some((OutboundKind::Status, pairing_text(&code))))
                    .await?;
                return Ok(false);
            }
        }
        if let Some(outcome) = self.decision(entry).await {
            let text = outcome?;
            self.handler
                .answer(entry, Some((OutboundKind::Status, text)))
                .await?;
            return Ok(false);
        }
        if Command::parse(entry.message.text.trim()) == Some(Command::Stop) {
            let (stopped, killed) = self.stop_here(&entry.session_key, lanes);
            // What the stopped turn asked and no one decided is no longer asked.
            self.approvals.withdraw_session(&entry.session_key).await;
            if let Some(signals) = &self.signals {
                signals.send(crate::signals::Signal::Stop {
                    session: entry.session_key.clone(),
                });
            }
            let text = match (stopped, killed) {
                (false, 0) if self.signals.is_some() => {
                    "⏹ Nothing runs here; the stop went to the other processes.".to_string()
                }
                (false, 0) => "Nothing is running.".to_string(),
                (true, 0) => "⏹ Stopped the running turn.".to_string(),
                (false, n) => format!("⏹ Stopping {n} subagent(s)."),
                (true, n) => format!("⏹ Stopped the running turn and {n} subagent(s)."),
            };
            self.handler
                .answer(entry, Some((OutboundKind::Status, text)))
                .await?;
            return Ok(false);
        }
        Ok(true)
    }
}

#[async_trait]
impl Inbox for Ingress {
    async fn accept(&self, message: InboundMessage) -> Result<Accepted, InboxError> {
        self.accept_for(message, None).await
    }

    /// A button press or a signed call: journalled on the request's chat (a redelivery is
    /// the same entry and changes nothing), carried out, and the entry answered without a
    /// reply (the prompt's edit shows who decided what).
    async fn decide(&self, request: DecisionRequest) -> Result<DecisionOutcome, InboxError> {
        let failed = |e: StoreError| InboxError(e.to_string());
        let Some(row) = self
            .admission
            .approvals
            .find(&request.approval_id)
            .await
            .map_err(failed)?
        else {
            return Ok(DecisionOutcome::NotFound);
        };
        if row.request.route.channel != request.channel {
            return Ok(DecisionOutcome::NotFound);
        }
        let person = format!("{}:{}", request.channel, request.sender.id);
        let message = InboundMessage {
            route: row.request.route.clone(),
            sender: request.sender.clone(),
            platform_message_id: request.platform_id.clone(),
            text: request.decision.command(&request.approval_id),
            mentioned: true,
            reply_to: None,
            internal: false,
            attachments: Vec::new(),
            mention_names: Vec::new(),
        };
        let inserted = self
            .store
            .journal_insert(&message, &row.request.session_key, crate::clock::now_ms())
            .await
            .map_err(failed)?;
        let outcome = self
            .admission
            .approvals
            .decide(
                &request.approval_id,
                request.decision,
                &person,
                Some(&request.channel),
            )
            .await
            .map_err(failed)?;
        if let JournalInsert::New(entry) = inserted {
            self.admission
                .handler
                .answer(&entry, None)
                .await
                .map_err(failed)?;
        }
        Ok(outcome)
    }

    fn session_key_of(&self, message: &InboundMessage, agent: Option<&str>) -> String {
        let agent = agent.unwrap_or_else(|| self.agents.route(&message.route));
        message.route.session_key_for(agent)
    }

    async fn accept_for(
        &self,
        message: InboundMessage,
        agent: Option<&str>,
    ) -> Result<Accepted, InboxError> {
        let session_key = self.session_key_of(&message, agent);
        let inserted = self
            .store
            .journal_insert(&message, &session_key, crate::clock::now_ms())
            .await
            .map_err(|e| InboxError(e.to_string()))?;
        Ok(match inserted {
            JournalInsert::New(entry) => {
                crate::metrics::inbound(&entry.message.route.channel);
                let journal_id = entry.id;
                // Journalled already: if this fails, the entry is handled after restart.
                if let Err(err) = self.dispatch(entry).await {
                    tracing::warn!(error = %err, "could not dispatch a journalled message");
                }
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

//! Approvals as channels see them: the prompt a bot message carries (rendered natively where
//! the platform has buttons) and a person's decision coming back (`Inbox::decide`).

use crate::Sender;
use serde::{Deserialize, Serialize};

/// A tool call waiting for a person's yes, as a bot message of kind `approval` carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalPrompt {
    /// Short id people type (`/approve <id>`) and buttons carry.
    pub id: String,
    pub tool: String,
    /// The arguments as shown: secrets masked, long values cut with their length and hash.
    pub arguments: String,
    /// Why it asks ("host exec always asks", "this turn read https://…").
    pub reason: String,
    /// When it is denied if no one decides (unix seconds).
    pub expires_at: i64,
}

/// What a person decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Run it this once.
    Approve,
    /// Run it, and do not ask again in this chat for this tool (and host).
    Always,
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Always => "always",
            Decision::Deny => "deny",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "approve" => Decision::Approve,
            "always" => Decision::Always,
            "deny" => Decision::Deny,
            _ => return None,
        })
    }

    /// One letter for a button's payload (`a`, `w`, `d`).
    pub fn letter(self) -> char {
        match self {
            Decision::Approve => 'a',
            Decision::Always => 'w',
            Decision::Deny => 'd',
        }
    }

    pub fn from_letter(c: char) -> Option<Self> {
        Some(match c {
            'a' => Decision::Approve,
            'w' => Decision::Always,
            'd' => Decision::Deny,
            _ => return None,
        })
    }

    /// A button's payload: `ap:<id>:<letter>` (Telegram allows 64 bytes, Discord 100).
    pub fn button_data(self, approval_id: &str) -> String {
        format!("ap:{approval_id}:{}", self.letter())
    }

    /// The approval id and decision a button's payload names.
    pub fn from_button_data(data: &str) -> Option<(String, Decision)> {
        let rest = data.strip_prefix("ap:")?;
        let (id, letter) = rest.rsplit_once(':')?;
        let mut letters = letter.chars();
        let decision = Decision::from_letter(letters.next()?)?;
        if letters.next().is_some() || id.is_empty() {
            return None;
        }
        Some((id.to_string(), decision))
    }

    /// The chat command that carries the same decision.
    pub fn command(self, approval_id: &str) -> String {
        match self {
            Decision::Approve => format!("/approve {approval_id}"),
            Decision::Always => format!("/approve {approval_id} always"),
            Decision::Deny => format!("/deny {approval_id}"),
        }
    }
}

/// A decision arriving from a platform (a button press, a signed HTTP call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRequest {
    /// The channel instance it came through; it may decide only approvals asked there.
    pub channel: String,
    pub approval_id: String,
    pub decision: Decision,
    pub sender: Sender,
    /// The platform's id for this press or call, unique within the channel: a redelivered
    /// press is journalled once and has one effect.
    pub platform_id: String,
}

/// What became of a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecisionOutcome {
    /// Recorded: the waiting call goes on (or is denied).
    Recorded { decision: Decision, by: String },
    /// No such approval on this channel.
    NotFound,
    /// Someone decided before (a second press, another instance).
    AlreadyDecided { decision: Decision, by: String },
    /// It expired or its turn ended before anyone decided.
    Expired,
    /// This person may not decide it.
    NotAllowed,
}

impl DecisionOutcome {
    /// One line for the person who pressed (a button's toast, a command's answer).
    pub fn words(&self) -> String {
        match self {
            DecisionOutcome::Recorded { decision, .. } => match decision {
                Decision::Approve => "✅ Approved.".into(),
                Decision::Always => "✅ Approved, and remembered for this chat.".into(),
                Decision::Deny => "🚫 Denied.".into(),
            },
            DecisionOutcome::NotFound => "No such approval request.".into(),
            DecisionOutcome::AlreadyDecided { decision, by } => {
                let word = match decision {
                    Decision::Deny => "denied",
                    _ => "approved",
                };
                format!("Already {word} by {by}.")
            }
            DecisionOutcome::Expired => "That request has expired.".into(),
            DecisionOutcome::NotAllowed => "You may not decide this request.".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn button_data_round_trips_and_rejects_other_payloads() {
        for decision in [Decision::Approve, Decision::Always, Decision::Deny] {
            let data = decision.button_data("k3x9q2");
            assert!(data.len() <= 64);
            assert_eq!(
                Decision::from_button_data(&data),
                Some(("k3x9q2".to_string(), decision))
            );
        }
        assert_eq!(Decision::from_button_data("ap:k3x9q2:x"), None);
        assert_eq!(Decision::from_button_data("ap::a"), None);
        assert_eq!(Decision::from_button_data("other"), None);
    }
}

//! The approval keys (SPEC section 17): which tool calls wait for a person's yes, who may
//! give it, and for how long a call waits. `[approvals]` holds the defaults; an agent's
//! `[agents.ID.approvals]` sets any of them for that agent (unset keys inherited).

use serde::{Deserialize, Serialize};

/// The tool classes `tools` may name as `class:<name>`.
pub const CLASSES: [&str; 5] = ["read", "write", "exec", "egress", "spawn"];

/// `[approvals]`: the defaults every agent inherits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsConfig {
    /// Tool names and classes (`class:exec`) whose calls ask first. Host `exec` always asks.
    pub tools: Vec<String>,
    /// `<channel>:<user id>` of the people who may decide anywhere.
    pub approvers: Vec<String>,
    /// Only approvers decide, even in a DM (else the sender decides their own calls there).
    pub approvers_only: bool,
    /// A turn that read untrusted content asks before every `egress` and `exec` call.
    pub taint: bool,
    /// How long a call waits for a decision before it is denied.
    pub timeout_secs: u64,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        ApprovalsConfig {
            tools: Vec::new(),
            approvers: Vec::new(),
            approvers_only: false,
            taint: true,
            timeout_secs: 600,
        }
    }
}

/// `[agents.ID.approvals]`: any key set here replaces `[approvals]`'s for that agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsOverride {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvers: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvers_only: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub taint: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

impl ApprovalsConfig {
    /// These defaults with an agent's own keys laid over them.
    pub fn with(&self, over: Option<&ApprovalsOverride>) -> ApprovalsConfig {
        let Some(over) = over else {
            return self.clone();
        };
        ApprovalsConfig {
            tools: over.tools.clone().unwrap_or_else(|| self.tools.clone()),
            approvers: over
                .approvers
                .clone()
                .unwrap_or_else(|| self.approvers.clone()),
            approvers_only: over.approvers_only.unwrap_or(self.approvers_only),
            taint: over.taint.unwrap_or(self.taint),
            timeout_secs: over.timeout_secs.unwrap_or(self.timeout_secs),
        }
    }

    /// What is wrong with these keys (under `prefix`): unknown classes, approvers that are
    /// not `<channel>:<user id>`, a timeout of 0.
    pub fn problems(&self, prefix: &str) -> Vec<(String, String)> {
        let mut found = Vec::new();
        for (i, entry) in self.tools.iter().enumerate() {
            if let Some(class) = entry.strip_prefix("class:")
                && !CLASSES.contains(&class)
            {
                found.push((
                    format!("{prefix}.tools[{i}]"),
                    format!(
                        "unknown class `{class}`; classes are {}",
                        CLASSES.join(", ")
                    ),
                ));
            }
        }
        for (i, who) in self.approvers.iter().enumerate() {
            let ok = who
                .rsplit_once(':')
                .is_some_and(|(channel, user)| !channel.is_empty() && !user.is_empty());
            if !ok {
                found.push((
                    format!("{prefix}.approvers[{i}]"),
                    format!("`{who}` must be `<channel>:<user id>`, e.g. `telegram:42`"),
                ));
            }
        }
        if self.timeout_secs == 0 {
            found.push((
                format!("{prefix}.timeout_secs"),
                "must be at least 1 second".into(),
            ));
        }
        found
    }
}

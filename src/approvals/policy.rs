//! Who must approve what: each agent's `[approvals]` resolved once at start, and the reason
//! a call asks (or None when it runs at once).

use crate::config::{ApprovalsConfig, Config};
use crate::tools::ToolRisk;
use ferroclaw_channel_core::{ChatKind, ChatRoute};
use std::collections::HashMap;

/// Every agent's approval rules.
pub struct Policies {
    by_agent: HashMap<String, ApprovalsConfig>,
    defaults: ApprovalsConfig,
}

impl Policies {
    pub fn from_config(config: &Config) -> Self {
        let by_agent = config
            .agents
            .iter()
            .map(|(id, def)| (id.clone(), config.approvals.with(def.approvals.as_ref())))
            .collect();
        Policies {
            by_agent,
            defaults: config.approvals.clone(),
        }
    }

    pub fn of(&self, agent: &str) -> &ApprovalsConfig {
        self.by_agent.get(agent).unwrap_or(&self.defaults)
    }

    /// Whether `person` (`<channel>:<user>`) is one of an agent's approvers.
    pub fn is_approver(&self, agent: &str, person: &str) -> bool {
        self.of(agent).approvers.iter().any(|a| a == person)
    }
}

/// Why a call of `tool` must ask under `policy`, given the turn's taint; None: it runs.
pub fn reason(
    policy: &ApprovalsConfig,
    tool: &str,
    risk: &ToolRisk,
    taint: Option<&str>,
) -> Option<String> {
    if let Some(why) = &risk.asks {
        return Some(why.clone());
    }
    let class = risk.class.as_str();
    let listed = |t: &&String| *t == tool || t.strip_prefix("class:") == Some(class);
    if let Some(listed) = policy.tools.iter().find(listed) {
        return Some(format!("approvals.tools lists `{listed}`"));
    }
    let risky = matches!(
        risk.class,
        crate::tools::ToolClass::Egress | crate::tools::ToolClass::Exec
    );
    match taint {
        Some(source) if policy.taint && risky => Some(format!("this turn read {source}")),
        _ => None,
    }
}

/// Who may decide a request of `requester` in `route`: the approvers, and in a DM (a webhook
/// or terminal conversation counts as one) the requester too unless `approvers_only`.
pub fn deciders(
    policy: &ApprovalsConfig,
    route: &ChatRoute,
    requester: Option<&str>,
) -> Vec<String> {
    let mut who = policy.approvers.clone();
    let direct = matches!(route.kind, ChatKind::Direct | ChatKind::Conversation);
    if let Some(requester) = requester
        && direct
        && !policy.approvers_only
        && !who.iter().any(|w| w == requester)
    {
        who.push(requester.to_string());
    }
    who
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolClass;

    fn risk(class: ToolClass) -> ToolRisk {
        ToolRisk::of(class)
    }

    #[test]
    fn a_call_asks_by_name_by_class_on_the_host_and_when_tainted() {
        let mut policy = ApprovalsConfig::default();
        assert_eq!(
            reason(&policy, "web_fetch", &risk(ToolClass::Egress), None),
            None
        );
        let host = ToolRisk {
            asks: Some("`exec` runs on the host, which always asks".into()),
            ..risk(ToolClass::Exec)
        };
        assert!(
            reason(&policy, "exec", &host, None)
                .unwrap()
                .contains("always asks")
        );
        let tainted = reason(
            &policy,
            "web_fetch",
            &risk(ToolClass::Egress),
            Some("https://a.example/"),
        );
        assert_eq!(
            tainted.as_deref(),
            Some("this turn read https://a.example/")
        );
        assert_eq!(
            reason(&policy, "write_file", &risk(ToolClass::Write), Some("x")),
            None,
            "taint asks only before egress and exec"
        );
        policy.taint = false;
        assert_eq!(
            reason(&policy, "web_fetch", &risk(ToolClass::Egress), Some("x")),
            None
        );
        policy.tools = vec!["class:write".into(), "send_file".into()];
        assert!(reason(&policy, "write_file", &risk(ToolClass::Write), None).is_some());
        assert!(reason(&policy, "send_file", &risk(ToolClass::Write), None).is_some());
        assert_eq!(
            reason(&policy, "read_file", &risk(ToolClass::Read), None),
            None
        );
    }

    #[test]
    fn in_a_dm_the_sender_decides_unless_approvers_only_and_never_in_a_group() {
        let mut policy = ApprovalsConfig {
            approvers: vec!["telegram:1".into()],
            ..Default::default()
        };
        let route = |kind, chat: &str| ChatRoute {
            channel: "telegram".into(),
            kind,
            chat_id: chat.into(),
            thread_id: None,
        };
        let (dm, group) = (route(ChatKind::Direct, "5"), route(ChatKind::Group, "-9"));
        assert_eq!(
            deciders(&policy, &dm, Some("telegram:5")),
            vec!["telegram:1", "telegram:5"]
        );
        assert_eq!(
            deciders(&policy, &group, Some("telegram:5")),
            vec!["telegram:1"]
        );
        policy.approvers_only = true;
        assert_eq!(
            deciders(&policy, &dm, Some("telegram:5")),
            vec!["telegram:1"]
        );
    }
}

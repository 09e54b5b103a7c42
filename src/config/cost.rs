//! The cost-control keys (SPEC section 16): prices per model, spending caps and the limits
//! on one person's messages and on one message's reach.

use serde::{Deserialize, Serialize};

/// `[prices."<provider>/<model>"]`: USD per million tokens. Cached-input and cache-write
/// tokens are billed at the input price unless their own is given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PriceConfig {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_input_per_mtok: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<f64>,
}

/// `[budgets]`: spending caps in USD (0: no cap). Days and months are UTC.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetsConfig {
    pub user_daily_usd: f64,
    pub user_monthly_usd: f64,
    pub chat_daily_usd: f64,
    /// Each agent's (an agent's own `[agents.ID] daily_usd` overrides it).
    pub agent_daily_usd: f64,
    pub total_daily_usd: f64,
    pub total_monthly_usd: f64,
    /// Work nobody is waiting on in the chat: schedules, heartbeats, subagents, delegations,
    /// team tasks, plan steps run for a tool.
    pub background_daily_usd: f64,
}

impl BudgetsConfig {
    /// Every cap by its key under `[budgets]`.
    pub fn caps(&self) -> [(&'static str, f64); 7] {
        [
            ("user_daily_usd", self.user_daily_usd),
            ("user_monthly_usd", self.user_monthly_usd),
            ("chat_daily_usd", self.chat_daily_usd),
            ("agent_daily_usd", self.agent_daily_usd),
            ("total_daily_usd", self.total_daily_usd),
            ("total_monthly_usd", self.total_monthly_usd),
            ("background_daily_usd", self.background_daily_usd),
        ]
    }

    /// True when any cap is set (then every model call reserves before it is made).
    pub fn any(&self, agents: &std::collections::BTreeMap<String, super::AgentDef>) -> bool {
        self.caps().iter().any(|(_, cap)| *cap > 0.0)
            || agents
                .values()
                .any(|a| a.daily_usd.is_some_and(|cap| cap > 0.0))
    }
}

/// `[limits]`: how often a person may write and how far one message may reach.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Messages one person may send per minute (0: no limit).
    pub messages_per_minute: u32,
    /// Messages one person may send per hour (0: no limit).
    pub messages_per_hour: u32,
    /// Messages one group chat may send per minute, everyone in it together (0: no limit).
    pub group_messages_per_minute: u32,
    /// Messages one group chat may send per hour (0: no limit).
    pub group_messages_per_hour: u32,
    /// Subagent runs, delegations, team tasks and plan steps one message may cause, its
    /// whole tree counted.
    pub max_runs_per_message: u32,
    /// Model calls one message may cause, its whole tree counted.
    pub max_model_calls_per_message: u32,
    /// `"<channel>:<user id>"` of people the rate limits do not apply to.
    pub exempt: Vec<String>,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            messages_per_minute: 0,
            messages_per_hour: 0,
            group_messages_per_minute: 0,
            group_messages_per_hour: 0,
            max_runs_per_message: 50,
            max_model_calls_per_message: 200,
            exempt: Vec::new(),
        }
    }
}

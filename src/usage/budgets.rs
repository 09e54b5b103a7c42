//! Which spending caps a model call is held against, and the line a person reads when one
//! is spent.

use crate::config::Config;
use crate::policy::CallScope;
use crate::storage::BudgetHold;

/// One configured cap, as it applies to a call.
struct Cap {
    /// What the person reads ("your daily budget").
    name: &'static str,
    /// The config key that sets it.
    key: String,
    budget: String,
    monthly: bool,
    usd: f64,
}

/// The caps of a call and, in the same order, how to name each.
pub struct Holds {
    pub holds: Vec<BudgetHold>,
    names: Vec<(&'static str, String, bool)>,
}

/// The caps that apply to a call in `scope` at `now_ms` (none configured: empty);
/// `background` work is also held by the background cap.
pub fn holds(config: &Config, scope: &CallScope<'_>, background: bool, now_ms: i64) -> Holds {
    let b = &config.budgets;
    let route = scope.route;
    let mut caps = Vec::new();
    let mut cap = |name, key: &str, budget: String, monthly, usd: f64| {
        if usd > 0.0 {
            caps.push(Cap {
                name,
                key: key.to_string(),
                budget,
                monthly,
                usd,
            });
        }
    };
    if let Some(sender) = scope.sender {
        let user = format!("user:{}:{sender}", route.channel);
        cap(
            "your daily budget",
            "budgets.user_daily_usd",
            user.clone(),
            false,
            b.user_daily_usd,
        );
        cap(
            "your monthly budget",
            "budgets.user_monthly_usd",
            user,
            true,
            b.user_monthly_usd,
        );
    }
    cap(
        "this chat's daily budget",
        "budgets.chat_daily_usd",
        format!("chat:{}:{}", route.channel, route.chat_id),
        false,
        b.chat_daily_usd,
    );
    let agent_cap = config
        .agents
        .get(scope.agent)
        .and_then(|a| a.daily_usd)
        .unwrap_or(b.agent_daily_usd);
    let agent_key = if config
        .agents
        .get(scope.agent)
        .is_some_and(|a| a.daily_usd.is_some())
    {
        format!("agents.{}.daily_usd", scope.agent)
    } else {
        "budgets.agent_daily_usd".into()
    };
    cap(
        "this agent's daily budget",
        &agent_key,
        format!("agent:{}", scope.agent),
        false,
        agent_cap,
    );
    if background {
        cap(
            "the daily budget for background work",
            "budgets.background_daily_usd",
            "background".into(),
            false,
            b.background_daily_usd,
        );
    }
    cap(
        "the service's daily budget",
        "budgets.total_daily_usd",
        "total".into(),
        false,
        b.total_daily_usd,
    );
    cap(
        "the service's monthly budget",
        "budgets.total_monthly_usd",
        "total".into(),
        true,
        b.total_monthly_usd,
    );
    let day = crate::clock::utc_day(now_ms);
    let month = day[..7].to_string();
    Holds {
        holds: caps
            .iter()
            .map(|c| BudgetHold {
                budget: c.budget.clone(),
                period: if c.monthly {
                    month.clone()
                } else {
                    day.clone()
                },
                cap_usd: c.usd,
            })
            .collect(),
        names: caps
            .into_iter()
            .map(|c| (c.name, c.key, c.monthly))
            .collect(),
    }
}

impl Holds {
    /// The line for a call refused by hold `i`: which cap, and when it resets.
    pub fn refusal(&self, i: usize, now_ms: i64) -> String {
        let (name, key, monthly) = &self.names[i];
        let (day, month) = crate::clock::utc_resets(now_ms);
        let (when, wait) = if *monthly {
            ("on the 1st at 00:00 UTC", month)
        } else {
            ("at 00:00 UTC", day)
        };
        format!(
            "💸 {} ({} = {}) is spent; it resets {when} (in {}).",
            capitalise(name),
            key,
            super::dollars(self.holds[i].cap_usd),
            super::wait_words(wait)
        )
    }
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

//! `/usage` (the sender's and the chat's tokens and cost: today, this month, by model, with
//! the cache-hit rate) and the spend line in `/status`.

use crate::commands::command;
use crate::component::{CommandInfo, CommandScope, Component, Reply};
use crate::storage::{StoreError, UsageFilter, UsageGroup, UsageStore, UsageTotal};
use async_trait::async_trait;
use ferroclaw_channel_core::OutboundKind;
use std::sync::Arc;

pub const COMMANDS: &[CommandInfo] = &[command(
    "usage",
    "Tokens and cost: yours and this chat's",
    None,
    "/usage — your and this chat's tokens and cost today and this month, by model",
)];

pub struct UsageComponent {
    store: Arc<dyn UsageStore>,
}

impl UsageComponent {
    pub fn new(store: Arc<dyn UsageStore>) -> Self {
        UsageComponent { store }
    }
}

/// One line of sums: calls, tokens in (with the share read from cache), out, cost.
pub fn summary(t: &UsageTotal) -> String {
    if t.calls == 0 {
        return "nothing yet".into();
    }
    let unpriced = if t.unpriced_calls > 0 {
        format!(" ({} calls of models without a price)", t.unpriced_calls)
    } else {
        String::new()
    };
    format!(
        "{} calls, {} tokens in ({} from cache), {} out, {}{unpriced}",
        t.calls,
        t.input_tokens,
        percent(t.cache_hit_rate()),
        t.output_tokens,
        super::dollars(t.cost_usd)
    )
}

/// A share as a whole percentage.
fn percent(share: f64) -> String {
    format!("{:.0}%", 100.0 * share)
}

#[async_trait]
impl Component for UsageComponent {
    fn commands(&self) -> &'static [CommandInfo] {
        COMMANDS
    }

    async fn command(
        &self,
        _name: &str,
        _args: &str,
        cx: &CommandScope<'_>,
    ) -> Result<Reply, StoreError> {
        let now = crate::clock::now_ms();
        let today = crate::clock::utc_day(now);
        let month_start = format!("{}-01", &today[..7]);
        let route = &cx.session.route;
        let chat = format!("{}:{}", route.channel, route.chat_id);
        let span = |from: &str, user: Option<String>, chat: Option<String>| UsageFilter {
            from_day: from.to_string(),
            to_day: today.clone(),
            user,
            chat,
        };
        let mut lines = vec!["📊 Usage (days in UTC)".to_string()];
        if let Some(sender) = cx.sender {
            let me = format!("{}:{sender}", route.channel);
            let day = self
                .store
                .usage_total(&span(&today, Some(me.clone()), None))
                .await?;
            let month = self
                .store
                .usage_total(&span(&month_start, Some(me), None))
                .await?;
            lines.push(format!("You — today: {}", summary(&day)));
            lines.push(format!("You — this month: {}", summary(&month)));
        }
        let day = self
            .store
            .usage_total(&span(&today, None, Some(chat.clone())))
            .await?;
        let month = self
            .store
            .usage_total(&span(&month_start, None, Some(chat.clone())))
            .await?;
        lines.push(format!("This chat — today: {}", summary(&day)));
        lines.push(format!("This chat — this month: {}", summary(&month)));
        let by_model = self
            .store
            .usage_report(
                &span(&month_start, None, Some(chat)),
                Some(UsageGroup::Model),
            )
            .await?;
        if !by_model.is_empty() {
            lines.push("This chat this month, by model:".into());
            for row in &by_model {
                lines.push(format!("• {} — {}", row.key, summary(row)));
            }
        }
        Ok((OutboundKind::Status, lines.join("\n")))
    }

    async fn status(&self, cx: &CommandScope<'_>) -> Result<Vec<String>, StoreError> {
        let today = crate::clock::utc_day(crate::clock::now_ms());
        let route = &cx.session.route;
        let today = UsageFilter {
            chat: Some(format!("{}:{}", route.channel, route.chat_id)),
            ..UsageFilter::days(today.clone(), today)
        };
        let day = self.store.usage_total(&today).await?;
        Ok(vec![format!(
            "Spent today in this chat: {} ({} calls)",
            super::dollars(day.cost_usd),
            day.calls
        )])
    }
}

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

    async fn total(&self, filter: &UsageFilter) -> Result<UsageTotal, StoreError> {
        Ok(self
            .store
            .usage_report(filter, None)
            .await?
            .pop()
            .unwrap_or_default())
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
        cache_hit_rate(t),
        t.output_tokens,
        super::dollars(t.cost_usd)
    )
}

/// The share of input tokens read from the provider's prompt cache, as a percentage.
pub fn cache_hit_rate(t: &UsageTotal) -> String {
    if t.input_tokens <= 0 {
        return "0%".into();
    }
    format!(
        "{:.0}%",
        100.0 * t.cached_input_tokens as f64 / t.input_tokens as f64
    )
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
            let day = self.total(&span(&today, Some(me.clone()), None)).await?;
            let month = self.total(&span(&month_start, Some(me), None)).await?;
            lines.push(format!("You — today: {}", summary(&day)));
            lines.push(format!("You — this month: {}", summary(&month)));
        }
        let day = self.total(&span(&today, None, Some(chat.clone()))).await?;
        let month = self
            .total(&span(&month_start, None, Some(chat.clone())))
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
        let day = self
            .total(&UsageFilter {
                from_day: today.clone(),
                to_day: today,
                user: None,
                chat: Some(format!("{}:{}", route.channel, route.chat_id)),
            })
            .await?;
        Ok(vec![format!(
            "Spent today in this chat: {} ({} calls)",
            super::dollars(day.cost_usd),
            day.calls
        )])
    }
}

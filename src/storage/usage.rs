//! Model usage and what it cost, the spend held against each cap, and the rate limits'
//! record of who wrote when (SPEC section 16).
//!
//! The trait and its rows, then its SQL, written once for both dialects: the macro below
//! expands the same bodies for SQLite and PostgreSQL. Reserving differs by dialect (the
//! functions at the end): on SQLite, whose one writer runs one statement at a time, one
//! statement adds to every cap only when all fit; on PostgreSQL each cap is a conditional
//! upsert on the row it locks, in one transaction, so processes sharing the database cannot
//! both take the last dollar.

use super::*;
use async_trait::async_trait;

/// One model call's usage, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct NewUsage {
    pub at_ms: i64,
    /// The UTC date of `at_ms` (`YYYY-MM-DD`).
    pub day: String,
    pub session_key: String,
    pub agent: String,
    pub channel: String,
    /// `<channel>:<chat id>`.
    pub chat: String,
    /// `<channel>:<user id>` when a person's message caused the call.
    pub user: Option<String>,
    pub kind: String,
    /// The model that answered (`<provider>/<model>`).
    pub model: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_input_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_usd: f64,
    /// False when the model has no configured price (its cost counts as 0).
    pub priced: bool,
}

/// What a usage report groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageGroup {
    User,
    Chat,
    Agent,
    Model,
    Kind,
    Day,
}

impl UsageGroup {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "user" => UsageGroup::User,
            "chat" => UsageGroup::Chat,
            "agent" => UsageGroup::Agent,
            "model" => UsageGroup::Model,
            "kind" => UsageGroup::Kind,
            "day" => UsageGroup::Day,
            _ => return None,
        })
    }

    /// The column (a fixed name, never text from a request).
    fn column(self) -> &'static str {
        match self {
            UsageGroup::User => "COALESCE(user_id, '')",
            UsageGroup::Chat => "chat",
            UsageGroup::Agent => "agent",
            UsageGroup::Model => "model",
            UsageGroup::Kind => "kind",
            UsageGroup::Day => "day",
        }
    }
}

/// Which calls a report sums: UTC days `from_day..=to_day`, optionally one person or chat.
#[derive(Debug, Clone, Default)]
pub struct UsageFilter {
    pub from_day: String,
    pub to_day: String,
    pub user: Option<String>,
    pub chat: Option<String>,
}

impl UsageFilter {
    /// Every call of UTC days `from_day..=to_day`.
    pub fn days(from_day: String, to_day: String) -> Self {
        UsageFilter {
            from_day,
            to_day,
            user: None,
            chat: None,
        }
    }
}

/// Sums over a report's group (key empty when not grouped).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageTotal {
    pub key: String,
    pub calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_input_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_usd: f64,
    /// Calls of models without a price.
    pub unpriced_calls: i64,
}

impl UsageTotal {
    /// The share of input tokens read from the provider's prompt cache (0 without input).
    pub fn cache_hit_rate(&self) -> f64 {
        if self.input_tokens > 0 {
            self.cached_input_tokens as f64 / self.input_tokens as f64
        } else {
            0.0
        }
    }
}

/// One cap a call is held against: the budget's key (`user:<channel>:<id>`, `total`, ...),
/// its period (`2026-12-03` or `2026-12`) and the cap in USD.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetHold {
    pub budget: String,
    pub period: String,
    pub cap_usd: f64,
}

#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Record calls' usage (one statement for them all) and, in the same transaction, move
    /// each settle's holds by its delta (a call's real cost minus its reservation).
    async fn usage_record(
        &self,
        usage: &[NewUsage],
        settles: &[(Vec<BudgetHold>, f64)],
    ) -> StoreResult<()>;
    /// Move the holds' spend by `delta` (a call that got no answer gives its reservation back).
    async fn budget_settle(&self, holds: &[BudgetHold], delta: f64) -> StoreResult<()>;
    /// Add `amount` to every hold's spend, all or none: `Err(i)` names the first hold (in
    /// the order given) whose cap it would pass, and nothing is added.
    async fn budget_reserve(
        &self,
        holds: &[BudgetHold],
        amount: f64,
    ) -> StoreResult<Result<(), usize>>;
    /// Several calls' reservations, each all or none as in `budget_reserve`; one answer per
    /// call, in the order given. SQLite takes them one after another in one transaction (a
    /// batch costs its single writer one commit); PostgreSQL at once, each in its own
    /// transaction, as separate calls would.
    async fn budget_reserve_each(
        &self,
        calls: &[(Vec<BudgetHold>, f64)],
    ) -> StoreResult<Vec<Result<(), usize>>>;
    /// What each hold has spent (settled and reserved) in its period.
    async fn budget_spent(&self, budget: &str, period: &str) -> StoreResult<f64>;
    /// A call was refused by `budget`'s cap in `period` at `now_ms` (for operator alerts).
    async fn budget_refused(&self, budget: &str, period: &str, now_ms: i64) -> StoreResult<()>;
    /// When `budget`'s cap last refused a call in `period`.
    async fn budget_refused_at(&self, budget: &str, period: &str) -> StoreResult<Option<i64>>;
    /// Sums of the calls `filter` selects, grouped (largest cost first) or in one row.
    async fn usage_report(
        &self,
        filter: &UsageFilter,
        group: Option<UsageGroup>,
    ) -> StoreResult<Vec<UsageTotal>>;
    /// The sums of every call `filter` selects (the ungrouped report's one row).
    async fn usage_total(&self, filter: &UsageFilter) -> StoreResult<UsageTotal> {
        Ok(self
            .usage_report(filter, None)
            .await?
            .pop()
            .unwrap_or_default())
    }
}

macro_rules! usage_sums {
    () => {
        "count(*), CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT), CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT), \
         CAST(COALESCE(SUM(cached_input_tokens), 0) AS BIGINT), CAST(COALESCE(SUM(cache_write_tokens), 0) AS BIGINT), \
         CAST(COALESCE(SUM(cost_usd), 0.0) AS DOUBLE PRECISION), CAST(COALESCE(SUM(1 - priced), 0) AS BIGINT) \
         FROM model_usage WHERE day >= "
    };
}

/// Every hold's net move over many settlements, in one (budget, period) order (so two
/// processes settling at once take the rows in the same order).
fn net_deltas<'a>(
    settles: impl IntoIterator<Item = (&'a [BudgetHold], f64)>,
) -> Vec<(&'a str, &'a str, f64)> {
    let mut net: std::collections::BTreeMap<(&str, &str), f64> = std::collections::BTreeMap::new();
    for (holds, delta) in settles {
        for hold in holds {
            *net.entry((&hold.budget, &hold.period)).or_default() += delta;
        }
    }
    net.into_iter().map(|((b, p), d)| (b, p, d)).collect()
}

/// One statement moving each hold by its own net delta (one call's settlement, or a
/// batch's at once).
macro_rules! settle_each_statement {
    ($db:ty, $deltas:expr) => {{
        let mut update =
            sqlx::QueryBuilder::<$db>::new("UPDATE budget_spend SET spent_usd = spent_usd + CASE");
        for (budget, period, delta) in $deltas.iter() {
            update.push(" WHEN budget = ");
            update.push_bind(*budget);
            update.push(" AND period = ");
            update.push_bind(*period);
            update.push(" THEN ");
            update.push_bind(*delta);
        }
        update.push(" ELSE 0.0 END WHERE ");
        for (i, (budget, period, _)) in $deltas.iter().enumerate() {
            update.push(if i == 0 {
                "(budget = "
            } else {
                " OR (budget = "
            });
            update.push_bind(*budget);
            update.push(" AND period = ");
            update.push_bind(*period);
            update.push(")");
        }
        update
    }};
}

macro_rules! sql {
    ($store:ty, $db:ty, $reserve:path, $reserve_each:path) => {
        #[async_trait::async_trait]
        impl $crate::storage::UsageStore for $store {
            async fn usage_record(&self, rows: &[NewUsage], settles: &[(Vec<BudgetHold>, f64)]) -> $crate::storage::StoreResult<()> {
                if rows.is_empty() {
                    return Ok(());
                }
                let mut insert = sqlx::QueryBuilder::<$db>::new(
                    "INSERT INTO model_usage (at, day, session_key, agent, channel, chat, user_id, kind, model, \
                     input_tokens, output_tokens, cached_input_tokens, cache_write_tokens, cost_usd, priced) ",
                );
                insert.push_values(rows, |mut row, u| {
                    row.push_bind(u.at_ms).push_bind(&u.day).push_bind(&u.session_key).push_bind(&u.agent)
                        .push_bind(&u.channel).push_bind(&u.chat).push_bind(&u.user).push_bind(&u.kind)
                        .push_bind(&u.model).push_bind(u.input_tokens).push_bind(u.output_tokens)
                        .push_bind(u.cached_input_tokens).push_bind(u.cache_write_tokens).push_bind(u.cost_usd)
                        .push_bind(i64::from(u.priced));
                });
                // Nothing to settle: one statement, no transaction (a round trip, not three).
                if settles.is_empty() {
                    insert.build().execute(&self.write).await?;
                    return Ok(());
                }
                let mut tx = self.write.begin().await?;
                insert.build().execute(&mut *tx).await?;
                // Every settlement of the batch in one statement, each hold by its net move.
                let deltas = net_deltas(settles.iter().map(|(holds, delta)| (holds.as_slice(), *delta)));
                if !deltas.is_empty() {
                    settle_each_statement!($db, deltas).build().execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn budget_settle(&self, holds: &[BudgetHold], delta: f64) -> $crate::storage::StoreResult<()> {
                if !holds.is_empty() {
                    settle_each_statement!($db, net_deltas([(holds, delta)])).build().execute(&self.write).await?;
                }
                Ok(())
            }

            async fn budget_reserve(&self, holds: &[BudgetHold], amount: f64) -> $crate::storage::StoreResult<Result<(), usize>> {
                if holds.is_empty() {
                    return Ok(Ok(()));
                }
                $reserve(&self.write, holds, amount).await
            }

            async fn budget_reserve_each(&self, calls: &[(Vec<BudgetHold>, f64)]) -> $crate::storage::StoreResult<Vec<Result<(), usize>>> {
                $reserve_each(&self.write, calls).await
            }

            async fn budget_spent(&self, budget: &str, period: &str) -> $crate::storage::StoreResult<f64> {
                let spent: Option<f64> = sqlx::query_scalar("SELECT spent_usd FROM budget_spend WHERE budget = $1 AND period = $2")
                    .bind(budget)
                    .bind(period)
                    .fetch_optional(&self.read)
                    .await?;
                Ok(spent.unwrap_or(0.0))
            }

            async fn budget_refused(&self, budget: &str, period: &str, now_ms: i64) -> $crate::storage::StoreResult<()> {
                sqlx::query(
                    "INSERT INTO budget_refusals (budget, period, at_ms) VALUES ($1, $2, $3) \
                     ON CONFLICT (budget, period) DO UPDATE SET at_ms = excluded.at_ms",
                )
                .bind(budget)
                .bind(period)
                .bind(now_ms)
                .execute(&self.write)
                .await?;
                Ok(())
            }

            async fn budget_refused_at(&self, budget: &str, period: &str) -> $crate::storage::StoreResult<Option<i64>> {
                Ok(sqlx::query_scalar("SELECT at_ms FROM budget_refusals WHERE budget = $1 AND period = $2")
                    .bind(budget)
                    .bind(period)
                    .fetch_optional(&self.read)
                    .await?)
            }

            async fn usage_report(&self, filter: &UsageFilter, group: Option<UsageGroup>) -> $crate::storage::StoreResult<Vec<UsageTotal>> {
                let mut query = sqlx::QueryBuilder::<$db>::new("SELECT ");
                match group {
                    Some(group) => query.push(group.column()),
                    None => query.push("''"),
                };
                query.push(", ");
                query.push(usage_sums!());
                query.push_bind(&filter.from_day);
                query.push(" AND day <= ");
                query.push_bind(&filter.to_day);
                if let Some(user) = &filter.user {
                    query.push(" AND user_id = ");
                    query.push_bind(user);
                }
                if let Some(chat) = &filter.chat {
                    query.push(" AND chat = ");
                    query.push_bind(chat);
                }
                if let Some(group) = group {
                    query.push(" GROUP BY ");
                    query.push(group.column());
                    query.push(" ORDER BY 7 DESC, 1");
                }
                let rows: Vec<(String, i64, i64, i64, i64, i64, f64, i64)> =
                    query.build_query_as().fetch_all(&self.read).await?;
                Ok(rows
                    .into_iter()
                    .map(|(key, calls, input_tokens, output_tokens, cached_input_tokens, cache_write_tokens, cost_usd, unpriced_calls)| UsageTotal {
                        key, calls, input_tokens, output_tokens, cached_input_tokens, cache_write_tokens, cost_usd, unpriced_calls,
                    })
                    .collect())
            }
        }
    };
}

sql!(
    super::SqliteStore,
    sqlx::Sqlite,
    reserve_in_one_statement,
    reserve_each_in_one_transaction
);
sql!(
    super::PostgresStore,
    sqlx::Postgres,
    reserve_row_by_row,
    reserve_each_row_by_row
);

/// A reservation on SQLite (see `reserve_on`), on the writer's connection.
async fn reserve_in_one_statement(
    write: &super::sqlite_conns::SqliteConns,
    holds: &[BudgetHold],
    amount: f64,
) -> StoreResult<Result<(), usize>> {
    reserve_on(&mut *write.acquire().await?, holds, amount).await
}

/// Calls' reservations on SQLite one after another in one transaction (one commit, one
/// write of each page touched, for the whole batch).
async fn reserve_each_in_one_transaction(
    write: &super::sqlite_conns::SqliteConns,
    calls: &[(Vec<BudgetHold>, f64)],
) -> StoreResult<Vec<Result<(), usize>>> {
    let mut answers = Vec::with_capacity(calls.len());
    if let [(holds, amount)] = calls {
        answers.push(reserve_in_one_statement(write, holds, *amount).await?);
        return Ok(answers);
    }
    let mut tx = write.begin().await?;
    for (holds, amount) in calls {
        answers.push(if holds.is_empty() {
            Ok(())
        } else {
            reserve_on(&mut tx, holds, *amount).await?
        });
    }
    tx.commit().await?;
    Ok(answers)
}

/// Calls' reservations on PostgreSQL at once, each in its own short transaction on its own
/// connection (one transaction for many would hold rows that other processes' reservations
/// wait on, in no one order).
async fn reserve_each_row_by_row(
    write: &sqlx::Pool<sqlx::Postgres>,
    calls: &[(Vec<BudgetHold>, f64)],
) -> StoreResult<Vec<Result<(), usize>>> {
    futures::future::try_join_all(calls.iter().map(|(holds, amount)| async move {
        if holds.is_empty() {
            Ok(Ok(()))
        } else {
            reserve_row_by_row(write, holds, *amount).await
        }
    }))
    .await
}

/// A reservation on SQLite, whose one writer runs one statement at a time: one statement
/// that adds `amount` to every hold only when none would pass its cap (a round trip where a
/// transaction would take five).
async fn reserve_on(
    conn: &mut sqlx::SqliteConnection,
    holds: &[BudgetHold],
    amount: f64,
) -> StoreResult<Result<(), usize>> {
    let mut upsert = sqlx::QueryBuilder::<sqlx::Sqlite>::new("WITH h(budget, period, cap) AS (");
    upsert.push_values(holds, |mut row, hold| {
        row.push_bind(&hold.budget)
            .push_bind(&hold.period)
            .push_bind(hold.cap_usd);
    });
    upsert.push(") INSERT INTO budget_spend (budget, period, spent_usd) SELECT budget, period, ");
    upsert.push_bind(amount);
    upsert.push(
        " FROM h WHERE NOT EXISTS (SELECT 1 FROM h AS c LEFT JOIN budget_spend AS b \
         ON b.budget = c.budget AND b.period = c.period WHERE COALESCE(b.spent_usd, 0.0) + ",
    );
    upsert.push_bind(amount);
    upsert.push(
        " > c.cap) ON CONFLICT (budget, period) DO UPDATE SET \
         spent_usd = budget_spend.spent_usd + excluded.spent_usd RETURNING budget",
    );
    let taken: Vec<String> = upsert.build_query_scalar().fetch_all(&mut *conn).await?;
    if !taken.is_empty() {
        return Ok(Ok(()));
    }
    // Refused: name the first cap it would pass.
    for (i, hold) in holds.iter().enumerate() {
        let spent: Option<f64> = sqlx::query_scalar(
            "SELECT spent_usd FROM budget_spend WHERE budget = $1 AND period = $2",
        )
        .bind(&hold.budget)
        .bind(&hold.period)
        .fetch_optional(&mut *conn)
        .await?;
        if spent.unwrap_or(0.0) + amount > hold.cap_usd {
            return Ok(Err(i));
        }
    }
    Ok(Err(0))
}

/// A reservation on PostgreSQL, where processes reserve at once: one conditional upsert per
/// hold in one transaction (each checks its cap against the row it locks), rows taken in one
/// order by every process so two reservations never wait on each other crosswise; a hold
/// that does not fit rolls the others back.
async fn reserve_row_by_row(
    write: &sqlx::Pool<sqlx::Postgres>,
    holds: &[BudgetHold],
    amount: f64,
) -> StoreResult<Result<(), usize>> {
    let mut tx = write.begin().await?;
    let mut order: Vec<usize> = (0..holds.len()).collect();
    order.sort_by(|a, b| {
        (&holds[*a].budget, &holds[*a].period).cmp(&(&holds[*b].budget, &holds[*b].period))
    });
    for i in order {
        let hold = &holds[i];
        let taken: Vec<f64> = sqlx::query_scalar(
            "INSERT INTO budget_spend (budget, period, spent_usd) SELECT $1, $2, $3 WHERE $3 <= $4 \
             ON CONFLICT (budget, period) DO UPDATE SET spent_usd = budget_spend.spent_usd + excluded.spent_usd \
             WHERE budget_spend.spent_usd + excluded.spent_usd <= $4 RETURNING spent_usd",
        )
        .bind(&hold.budget)
        .bind(&hold.period)
        .bind(amount)
        .bind(hold.cap_usd)
        .fetch_all(&mut *tx)
        .await?;
        if taken.is_empty() {
            tx.rollback().await?;
            return Ok(Err(i));
        }
    }
    tx.commit().await?;
    Ok(Ok(()))
}

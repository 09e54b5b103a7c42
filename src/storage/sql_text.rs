//! SQL fragments more than one aggregate's statements share (`concat!` pieces).

/// Outbox rows with the platform id of the message each edit replaces.
macro_rules! outbox_select {
    () => {
        "SELECT o.*, e.platform_message_id AS edit_platform_id FROM outbox o \
         LEFT JOIN outbox e ON e.id = o.edit_of "
    };
}

/// Rows due at `$3`: a conversation whose earliest pending row waits for its retry yields
/// nothing (order within a conversation). Shared by the channel-wide and the
/// one-conversation reads of pending rows.
macro_rules! outbox_not_held_back {
    () => {
        "NOT EXISTS (SELECT 1 FROM outbox w WHERE w.channel = o.channel AND w.state = 'pending' \
         AND w.chat_id = o.chat_id AND w.next_attempt_at > $3 AND w.id <= o.id \
         AND w.thread_id IS NOT DISTINCT FROM o.thread_id)"
    };
}

/// One item into a run's inbox (`$1` run id, `$2` kind, `$3` text, `$4` now), only while the
/// run has not ended.
macro_rules! run_mail_insert {
    () => {
        "INSERT INTO run_inbox (run_id, kind, text, created_at) SELECT $1, $2, $3, $4 \
         WHERE EXISTS (SELECT 1 FROM runs WHERE id = $1 AND announced = 0)"
    };
}

/// A session's oldest pending journal entry (`$1` session).
macro_rules! journal_next {
    () => {
        "SELECT id, session_key, payload FROM inbound \
         WHERE session_key = $1 AND state = 'pending' ORDER BY id LIMIT 1"
    };
}

/// The journal's highest id (0 when empty): a lane's fence (`LaneClaim::Held`).
macro_rules! journal_fence {
    () => {
        "SELECT COALESCE(MAX(id), 0) FROM inbound"
    };
}

pub(crate) use journal_fence;
pub(crate) use journal_next;
pub(crate) use outbox_not_held_back;
pub(crate) use outbox_select;
pub(crate) use run_mail_insert;

/// Rows inserted by `VALUES …` only when the data-modifying CTE `guard` returned a row:
/// `open_guard`, the `VALUES` list, then `close_guard` (PostgreSQL's one-statement turn
/// commit writes nothing for a turn answered already). `None` leaves the insert as it is.
pub(crate) fn open_guard<DB: sqlx::Database>(
    query: &mut sqlx::QueryBuilder<'_, DB>,
    guard: Option<&str>,
) {
    if guard.is_some() {
        query.push("SELECT * FROM (");
    }
}

/// The end of `open_guard`'s insert.
pub(crate) fn close_guard<DB: sqlx::Database>(
    query: &mut sqlx::QueryBuilder<'_, DB>,
    guard: Option<&str>,
) {
    if guard.is_some() {
        query.push(") AS v WHERE TRUE");
        where_guard(query, guard);
    }
}

/// An UPDATE's or DELETE's WHERE clause narrowed to run only when the CTE `guard` returned a
/// row.
pub(crate) fn where_guard<DB: sqlx::Database>(
    query: &mut sqlx::QueryBuilder<'_, DB>,
    guard: Option<&str>,
) {
    if let Some(guard) = guard {
        query
            .push(" AND EXISTS (SELECT 1 FROM ")
            .push(guard)
            .push(")");
    }
}

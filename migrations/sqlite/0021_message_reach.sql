-- How far each person's message has reached (SPEC section 16: max_runs_per_message,
-- max_model_calls_per_message), counted by every process on the database and across
-- restarts. `origin` names the message (channel, chat, thread, message id). Runs are taken
-- one at a time; model calls in blocks (a process uses its block before it asks again), and
-- the first few calls of a message's own first turn are counted in its process only: a
-- row created by anyone else starts `calls` at that allowance, so nothing goes uncounted.
-- `granted` is what the last statement gave (read back with RETURNING). Rows untouched for
-- a day are dropped.
CREATE TABLE message_reach (
    origin  TEXT PRIMARY KEY,
    runs    BIGINT NOT NULL,
    calls   BIGINT NOT NULL,
    granted BIGINT NOT NULL,
    at      BIGINT NOT NULL
);
CREATE INDEX message_reach_by_at ON message_reach (at);

-- Scheduled jobs (SPEC: scheduled tasks): one-shot reminders and cron jobs, stored with the
-- chat and thread they came from. A firing advances `next_run` with a compare-and-set in the
-- same transaction that journals the job's turn, so each due time fires exactly once, also
-- with several processes on one database.
CREATE TABLE jobs (
    id             TEXT PRIMARY KEY NOT NULL,
    session_key    TEXT NOT NULL,
    agent          TEXT NOT NULL,
    origin_route   TEXT NOT NULL,
    origin_message TEXT,
    kind           TEXT NOT NULL,
    spec           TEXT NOT NULL,
    timezone       TEXT NOT NULL,
    prompt         TEXT NOT NULL,
    in_origin      BIGINT NOT NULL,
    heartbeat      BIGINT NOT NULL,
    missed         TEXT NOT NULL,
    state          TEXT NOT NULL,
    next_run       BIGINT,
    runs           BIGINT NOT NULL DEFAULT 0,
    last_run       BIGINT,
    chain          BIGINT NOT NULL,
    created_in     TEXT NOT NULL,
    created_at     BIGINT NOT NULL
);
CREATE INDEX jobs_due ON jobs (state, next_run);
CREATE INDEX jobs_by_session ON jobs (session_key, state);
CREATE INDEX jobs_by_turn ON jobs (created_in);

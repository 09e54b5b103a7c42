-- The subagent run registry: every child run, its origin chat/thread, state and outcome.
-- `announced` turns 1 in the same transaction that queues the announcement, so an outcome
-- is announced exactly once across crashes.
CREATE TABLE runs (
    id              TEXT PRIMARY KEY NOT NULL,
    parent_session  TEXT NOT NULL,
    origin_route    TEXT NOT NULL,
    origin_message  TEXT,
    depth           BIGINT NOT NULL,
    label           TEXT NOT NULL,
    task            TEXT NOT NULL,
    model           TEXT NOT NULL,
    mode            TEXT NOT NULL,
    state           TEXT NOT NULL,
    result          TEXT,
    status_message  BIGINT,
    announced       BIGINT NOT NULL DEFAULT 0,
    created_at      BIGINT NOT NULL,
    started_at      BIGINT,
    ended_at        BIGINT
);
CREATE INDEX runs_by_parent ON runs (parent_session, created_at);
CREATE INDEX runs_unannounced ON runs (announced, created_at);

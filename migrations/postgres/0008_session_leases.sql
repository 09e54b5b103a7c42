-- Several processes on one PostgreSQL database: a session's pending journal entries are
-- worked by the process holding its lease (renewed while working, free once expired).
-- SQLite (one process) never writes here; the table exists so both schemas stay the same.
CREATE TABLE session_leases (
    session_key TEXT PRIMARY KEY NOT NULL,
    owner       TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX inbound_pending_by_session ON inbound (session_key, id) WHERE state = 'pending';

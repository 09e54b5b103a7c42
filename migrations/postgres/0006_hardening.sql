-- How many times a turn was started for a journal entry (a message that keeps killing the
-- process is given up after a few).
ALTER TABLE inbound ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0;
-- Pending rows by conversation and due time: finds conversations held back by a retry.
CREATE INDEX outbox_waiting ON outbox (channel, chat_id, next_attempt_at) WHERE state = 'pending';
-- Side effects of tool calls already carried out for a turn, so a turn redone after a crash
-- replays their results instead of repeating them.
CREATE TABLE tool_effects (
    turn_key   TEXT NOT NULL,
    call_key   TEXT NOT NULL,
    result     TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (turn_key, call_key)
);
-- A tiny row /readyz rewrites to prove the database still takes writes.
CREATE TABLE write_probe (
    id INTEGER PRIMARY KEY,
    at BIGINT NOT NULL
);

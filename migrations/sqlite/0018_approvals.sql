-- Approvals (SPEC section 17). A tool call that waits for a person's yes: one row per call,
-- found again by `call_ref` (its turn and place in it) when a turn is redone after a restart.
-- `deciders` is the JSON list of `<channel>:<user>` who may decide, fixed when it was asked.
-- The state moves once, from 'pending' to 'approved', 'denied' or 'expired', in one
-- conditional UPDATE: two presses (or two processes) have one effect.
CREATE TABLE approvals (
    id          TEXT PRIMARY KEY,
    call_ref    TEXT NOT NULL UNIQUE,
    session_key TEXT NOT NULL,
    channel     TEXT NOT NULL,
    chat_id     TEXT NOT NULL,
    route       TEXT NOT NULL,
    agent       TEXT NOT NULL,
    requester   TEXT,
    tool        TEXT NOT NULL,
    target      TEXT NOT NULL DEFAULT '',
    arguments   TEXT NOT NULL,
    reason      TEXT NOT NULL,
    deciders    TEXT NOT NULL,
    prompt_id   BIGINT,
    state       TEXT NOT NULL DEFAULT 'pending',
    always      BIGINT NOT NULL DEFAULT 0,
    decided_by  TEXT,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    decided_at  BIGINT
);
CREATE INDEX approvals_pending ON approvals (state, expires_at);
-- "Always" choices: in this chat, this tool (and for egress this host) no longer asks.
CREATE TABLE approval_rules (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    channel    TEXT NOT NULL,
    chat_id    TEXT NOT NULL,
    tool       TEXT NOT NULL,
    target     TEXT NOT NULL DEFAULT '',
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (channel, chat_id, tool, target)
);
-- The approval a bot message of kind 'approval' asks (JSON), for channels that render it.
ALTER TABLE outbox ADD COLUMN approval TEXT;
-- What untrusted content a subagent run read (the first source): the turn that reads its
-- outcome is tainted by it, whichever process runs that turn and after a restart.
CREATE TABLE run_taint (
    run_id     TEXT PRIMARY KEY,
    source     TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- Core tables: sessions, transcripts, the inbound journal and the outbox.
-- Times are unix milliseconds; ids come from BIGSERIAL sequences, never reused
-- (outbox ids double as per-conversation sequence numbers).

CREATE TABLE sessions (
    key          TEXT PRIMARY KEY NOT NULL,
    route        TEXT NOT NULL,
    epoch        BIGINT NOT NULL DEFAULT 0,
    model        TEXT,
    summary      TEXT,
    summary_upto BIGINT NOT NULL DEFAULT 0,
    tokens_in    BIGINT NOT NULL DEFAULT 0,
    tokens_out   BIGINT NOT NULL DEFAULT 0,
    last_model   TEXT,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);

CREATE TABLE transcript (
    id           BIGSERIAL PRIMARY KEY,
    session_key  TEXT NOT NULL,
    epoch        BIGINT NOT NULL,
    role         TEXT NOT NULL,
    content      TEXT NOT NULL,
    tool_calls   TEXT,
    tool_call_id TEXT,
    model        TEXT,
    tokens_in    BIGINT NOT NULL DEFAULT 0,
    tokens_out   BIGINT NOT NULL DEFAULT 0,
    created_at   BIGINT NOT NULL
);
CREATE INDEX transcript_by_session ON transcript (session_key, epoch, id);

CREATE TABLE inbound (
    id           BIGSERIAL PRIMARY KEY,
    channel      TEXT NOT NULL,
    chat_id      TEXT NOT NULL,
    platform_id  TEXT NOT NULL,
    session_key  TEXT NOT NULL,
    payload      TEXT NOT NULL,
    state        TEXT NOT NULL DEFAULT 'pending',
    received_at  BIGINT NOT NULL,
    done_at      BIGINT,
    UNIQUE (channel, chat_id, platform_id)
);
CREATE INDEX inbound_pending ON inbound (state, id);

CREATE TABLE outbox (
    id                  BIGSERIAL PRIMARY KEY,
    session_key         TEXT NOT NULL,
    channel             TEXT NOT NULL,
    chat_id             TEXT NOT NULL,
    thread_id           TEXT,
    route               TEXT NOT NULL,
    kind                TEXT NOT NULL,
    text                TEXT NOT NULL,
    in_reply_to         TEXT,
    edit_of             BIGINT,
    state               TEXT NOT NULL DEFAULT 'pending',
    attempts            BIGINT NOT NULL DEFAULT 0,
    next_attempt_at     BIGINT NOT NULL DEFAULT 0,
    last_error          TEXT,
    platform_message_id TEXT,
    created_at          BIGINT NOT NULL,
    delivered_at        BIGINT
);
CREATE INDEX outbox_pending ON outbox (channel, state, id);
CREATE INDEX outbox_by_conversation ON outbox (channel, chat_id, id);

-- Long-term memory (SPEC section 20). A memory belongs to one scope: a person
-- (`person:<channel>:<user id>`, the first identity of people linked with `/link`) or a chat
-- (`chat:<channel>:<chat id>`). Every read names its scopes; `scope_token` (a hash of the
-- scope, one word) is indexed with the text so a search is narrowed to its scopes by the
-- full-text index itself. `call_ref` is the save's identity across attempts of its turn: a
-- redone turn saves once. `embedding`: little-endian f32s from `embedding_model`.
CREATE TABLE memories (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    scope           TEXT NOT NULL,
    scope_token     TEXT NOT NULL,
    text            TEXT NOT NULL,
    tags            TEXT NOT NULL DEFAULT '',
    created_at      BIGINT NOT NULL,
    session_key     TEXT,
    call_ref        TEXT UNIQUE,
    embedding       BLOB,
    embedding_model TEXT
);
CREATE INDEX memories_by_scope ON memories (scope, id);
CREATE VIRTUAL TABLE memories_fts USING fts5(
    text, tags, scope_token,
    content = 'memories', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER memories_indexed_on_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, text, tags, scope_token)
    VALUES (new.id, new.text, new.tags, new.scope_token);
END;
CREATE TRIGGER memories_indexed_on_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text, tags, scope_token)
    VALUES ('delete', old.id, old.text, old.tags, old.scope_token);
END;
CREATE TRIGGER memories_indexed_on_update AFTER UPDATE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text, tags, scope_token)
    VALUES ('delete', old.id, old.text, old.tags, old.scope_token);
    INSERT INTO memories_fts (rowid, text, tags, scope_token)
    VALUES (new.id, new.text, new.tags, new.scope_token);
END;
-- People linked across channels: each member identity (`<channel>:<user id>`) names the
-- person (the identity that started the handshake) whose memories it shares.
CREATE TABLE memory_links (
    member     TEXT PRIMARY KEY,
    person     TEXT NOT NULL,
    linked_at  BIGINT NOT NULL
);
-- `/link` codes: one per identity, valid until `expires_at`, used once.
CREATE TABLE memory_link_codes (
    code        TEXT PRIMARY KEY,
    member      TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);

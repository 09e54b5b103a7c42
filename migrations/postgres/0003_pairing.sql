-- Who may talk to the bot in `pairing` access mode: pending codes and approved users.
CREATE TABLE pairing (
    channel     TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    user_name   TEXT NOT NULL DEFAULT '',
    code        TEXT,
    state       TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    approved_at BIGINT,
    PRIMARY KEY (channel, user_id)
);
CREATE UNIQUE INDEX pairing_by_code ON pairing (code);

-- Teams (SPEC section 12): a shared task board per team and each member's inbox.
-- `blocked_by` and `comments` are JSON; `origin` is where the task's runs announce
-- (the lead's session, chat and thread), JSON.
CREATE TABLE team_tasks (
    id          BIGSERIAL PRIMARY KEY,
    team        TEXT NOT NULL,
    title       TEXT NOT NULL,
    description TEXT NOT NULL,
    status      TEXT NOT NULL,
    assignee    TEXT,
    owner       TEXT,
    blocked_by  TEXT NOT NULL,
    result      TEXT,
    comments    TEXT NOT NULL,
    created_by  TEXT NOT NULL,
    origin      TEXT,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
CREATE INDEX team_tasks_by_team ON team_tasks (team, id);

CREATE TABLE team_messages (
    id          BIGSERIAL PRIMARY KEY,
    team        TEXT NOT NULL,
    sender      TEXT NOT NULL,
    recipient   TEXT NOT NULL,
    text        TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    read_at     BIGINT
);
CREATE INDEX team_messages_unread ON team_messages (team, recipient, read_at, id);

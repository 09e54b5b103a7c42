-- The admin API and /metrics: the backlog across channels and the newest runs, by index.
CREATE INDEX outbox_backlog ON outbox (id) WHERE state = 'pending';
CREATE INDEX runs_by_created ON runs (created_at, id);

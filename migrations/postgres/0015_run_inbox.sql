-- What a running subagent is told between its steps, kept until one of its steps takes it:
-- a steer instruction (`kind` 'steer') or the outcome of a child it spawned ('report').
-- Taking one moves it into the run's `step_input` in one transaction, so a kill -9 neither
-- loses nor repeats it, and whichever process resumes the run finds what is still waiting.
-- A run's rows go when it ends.
CREATE TABLE run_inbox (
    id         BIGSERIAL PRIMARY KEY,
    run_id     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    text       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX run_inbox_by_run ON run_inbox (run_id, id);

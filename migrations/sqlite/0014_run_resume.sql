-- A subagent run that a restart, or another process, resumes instead of announcing it as
-- interrupted: what it runs with (`spec`, JSON: system prompt, tools, sandbox, timeout), the
-- step it is on with that step's input (`step_input` is NULL once the step committed), and
-- how many times it was started (a run that keeps killing its process is given up).
ALTER TABLE runs ADD COLUMN spec TEXT;
ALTER TABLE runs ADD COLUMN step BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN step_input TEXT;
ALTER TABLE runs ADD COLUMN starts BIGINT NOT NULL DEFAULT 0;

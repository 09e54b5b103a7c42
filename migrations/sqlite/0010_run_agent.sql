-- Configured agents: the agent a subagent run runs as (its session key is
-- agent:<agent>:subagent:<run id>). Older rows ran as the default agent.
ALTER TABLE runs ADD COLUMN agent TEXT NOT NULL DEFAULT 'main';

-- The tokens each answered turn used (its model calls together), written by the same
-- transaction that marks the entry answered: a request's usage is its own turn's, however
-- many requests share the session at once.
ALTER TABLE inbound ADD COLUMN tokens_in BIGINT NOT NULL DEFAULT 0;
ALTER TABLE inbound ADD COLUMN tokens_out BIGINT NOT NULL DEFAULT 0;

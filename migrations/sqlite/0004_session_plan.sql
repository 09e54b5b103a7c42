-- The active plan of a session (JSON: goal, steps with status and results, card message id).
ALTER TABLE sessions ADD COLUMN plan TEXT;

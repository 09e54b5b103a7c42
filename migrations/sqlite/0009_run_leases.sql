-- Several processes on one PostgreSQL database: a live subagent run is leased by the process
-- running it (renewed while it runs); only runs whose lease expired are announced as
-- interrupted by another process. NULL: never leased (SQLite, older rows).
ALTER TABLE runs ADD COLUMN lease_until BIGINT;

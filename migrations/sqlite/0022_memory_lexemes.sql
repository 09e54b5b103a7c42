-- Memory search on PostgreSQL indexes each word joined to its scope's token (see the
-- PostgreSQL migration of the same number). SQLite's FTS5 index is unchanged: its
-- doclists are read newest first and stop at the limit.
SELECT 1;

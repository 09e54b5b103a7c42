-- Memory search on PostgreSQL (SPEC section 20): each word is indexed joined to its row's
-- scope token (`s<16 hex><word>`), one lexeme per scope and word, so a word's lookup reads
-- only that scope's posting list. Before, the token and the words were separate lexemes and
-- every lookup intersected the word's list with the scope's (100,000 entries for a large
-- scope): the slow part of a search. `memory_lexemes` is the one definition of that joining.
CREATE FUNCTION memory_lexemes(token TEXT, body TEXT) RETURNS tsvector
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT array_to_tsvector(ARRAY(SELECT token || l.lexeme FROM unnest(to_tsvector('simple', body)) AS l)) $$;
DROP INDEX memories_tsv;
ALTER TABLE memories DROP COLUMN tsv;
ALTER TABLE memories ADD COLUMN tsv tsvector
    GENERATED ALWAYS AS (memory_lexemes(scope_token, text || ' ' || tags)) STORED;
CREATE INDEX memories_tsv ON memories USING GIN (tsv);

-- prme-pg migration 0015_recall_words: recall matches words that PostgreSQL and the DuckDB memory pack
-- compute alike (issue 18), so a pack recalls and ranks exactly as the server does.
--   * prme._recall_words(text): the one tokenizer (docs/RECALL.md, "Words"): runs of characters
--     other than ASCII and common Unicode punctuation, ASCII lower-casing, 127 English stop words
--     dropped (prme._stop_words()), plural endings removed (Harman's S stemmer). It replaces
--     to_tsvector('english'), whose parser and Snowball stemmer DuckDB cannot match without an
--     extension.
--   * prme._owner_lexemes(user_id, content) keys those words by owner, as before; nodes.search
--     (written by add_node, its definition unchanged) and recall's query words both come from it, so recall,
--     find_nodes and their ranking (share of the query's words a memory has) are unchanged in form.
--   * Every stored search vector is recomputed (UPDATE prme.nodes SET search = ...), so
--     memories written before match as new ones do. Nothing else of a node changes: no journal
--     record, no version, no updated_at.
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0015_recall_words.sql (or prme-pg migrate).
-- Locks: catalog locks for a moment, then ROW EXCLUSIVE on prme.nodes and a row lock on every node
-- while the update rewrites each row and its GIN entries (about a second per 100,000 memories;
-- confirmations of a node wait for its row meanwhile, reads do not).

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/040_nodes.sql: the words recall matches

CREATE FUNCTION prme._stop_words()
RETURNS text[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN ARRAY[
    'i', 'me', 'my', 'myself', 'we', 'our', 'ours', 'ourselves', 'you', 'your', 'yours', 'yourself',
    'yourselves', 'he', 'him', 'his', 'himself', 'she', 'her', 'hers', 'herself', 'it', 'its', 'itself',
    'they', 'them', 'their', 'theirs', 'themselves', 'what', 'which', 'who', 'whom', 'this', 'that', 'these',
    'those', 'am', 'is', 'are', 'was', 'were', 'be', 'been', 'being', 'have', 'has', 'had',
    'having', 'do', 'does', 'did', 'doing', 'a', 'an', 'the', 'and', 'but', 'if', 'or',
    'because', 'as', 'until', 'while', 'of', 'at', 'by', 'for', 'with', 'about', 'against', 'between',
    'into', 'through', 'during', 'before', 'after', 'above', 'below', 'to', 'from', 'up', 'down', 'in',
    'out', 'on', 'off', 'over', 'under', 'again', 'further', 'then', 'once', 'here', 'there', 'when',
    'where', 'why', 'how', 'all', 'any', 'both', 'each', 'few', 'more', 'most', 'other', 'some',
    'such', 'no', 'nor', 'not', 'only', 'own', 'same', 'so', 'than', 'too', 'very', 's',
    't', 'can', 'will', 'just', 'don', 'should', 'now'
]::text[];

COMMENT ON FUNCTION prme._stop_words() IS
'Internal: the English stop words recall ignores (the list of PostgreSQL''s english dictionary, 127 words).';

CREATE FUNCTION prme._recall_words(content text)
RETURNS text[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN (
    SELECT coalesce(array_agg(s.word ORDER BY convert_to(s.word, 'UTF8')), '{}')
    FROM (
        SELECT DISTINCT
            CASE
                WHEN length(t.token) < 4 THEN t.token
                WHEN t.token LIKE '%ies' AND t.token NOT LIKE '%eies' AND t.token NOT LIKE '%aies'
                    THEN substr(t.token, 1, length(t.token) - 3) || 'y'
                WHEN
                    t.token LIKE '%es' AND t.token NOT LIKE '%aes' AND t.token NOT LIKE '%ees'
                    AND t.token NOT LIKE '%oes'
                    THEN substr(t.token, 1, length(t.token) - 1)
                WHEN t.token LIKE '%s' AND t.token NOT LIKE '%us' AND t.token NOT LIKE '%ss'
                    THEN substr(t.token, 1, length(t.token) - 1)
                ELSE t.token
            END AS word
        FROM
            regexp_split_to_table(
                translate(content, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'),  -- noqa: RF03
                '[\x01-\x2f\x3a-\x40\x5b-\x60\x7b-\xbf\xd7\xf7\u2000-\u206f\u3000-\u303f\ufeff]+'
            ) AS t (token)
        WHERE t.token <> '' AND length(t.token) <= 100 AND array_position(prme._stop_words(), t.token) IS NULL
    ) AS s
);

COMMENT ON FUNCTION prme._recall_words(text) IS
'Internal: the distinct words of content as recall matches them (docs/RECALL.md, "Words"), sorted by bytes; '
'the DuckDB pack''s prme.recall_words computes the same.';

-- The words of content that recall matches, each keyed by its owner: the first 16
-- hex digits of sha256(user_id), a slash, the word (prme._recall_words). A GIN index
-- over them leads with the owner in every key, so an owner's posting list for a
-- word holds that owner's memories only (docs/RECALL.md).
CREATE OR REPLACE FUNCTION prme._owner_lexemes(user_id text, content text)
RETURNS text[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN (
    SELECT coalesce(array_agg(substr(encode(sha256(convert_to(user_id, 'UTF8')), 'hex'), 1, 16) || '/' || w.word ORDER BY w.n), '{}')
    FROM unnest(prme._recall_words(content)) WITH ORDINALITY AS w (word, n)
);

COMMENT ON FUNCTION prme._owner_lexemes(text, text) IS
'Internal: the words of content (prme._recall_words), each prefixed by its owner key (16 hex digits of '
'sha256(user_id)) and a slash: what nodes.search holds and recall matches.';

REVOKE ALL ON FUNCTION prme._stop_words() FROM public;
REVOKE ALL ON FUNCTION prme._recall_words(text) FROM public;

-- The stored vectors of existing memories, from the new words (add_node writes new ones).
UPDATE prme.nodes SET search = array_to_tsvector(prme._owner_lexemes(user_id, content));
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (15, 'recall_words', '6270c06665c6d6acb917a2ef25fb216cb00842078913ab69cf20c9312c6580f9');

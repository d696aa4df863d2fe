-- =============================================================================
-- prme-pg: recall (full-text search ranked by relevance and virtual decay)
--
-- prme.recall(user_id, query, scopes, max_count, as_of) returns an owner's
-- memories that match the query, best first:
--   relevance = the share of the query's distinct lexemes found in the memory
--               (prme._recall_words, as nodes.search has them; the DuckDB pack
--               computes the same words and ranking, docs/RECALL.md "Words")
--   strength  = (effective_salience + effective_confidence) / 2   (at as_of)
--   score     = relevance * (0.5 + 0.5 * strength)
-- ordered by score descending, then id ascending (deterministic). A memory
-- matches when it shares at least one lexeme with the query; without a query
-- (NULL or blank) every memory matches with relevance 1 and strength ranks alone.
-- Archived and deprecated memories never appear; neither do another owner's.
--
-- The match runs on the GIN index over nodes.search, whose keys are the owner's key
-- followed by a lexeme: the work grows with the owner's matching memories, not with
-- the table. See docs/RECALL.md.
-- =============================================================================

CREATE FUNCTION prme._any_lexeme_query(lexemes text[])
RETURNS tsquery
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF lexemes IS NULL OR cardinality(lexemes) = 0 THEN
        RETURN NULL;
    END IF;
    -- 'l1' | 'l2' | ...: each lexeme quoted as tsquery input quotes it (quotes and
    -- backslashes doubled), so no lexeme is parsed or stemmed a second time.
    RETURN array_to_string(
        ARRAY(
            SELECT '''' || replace(replace(l.lexeme, E'\\', E'\\\\'), '''', '''''') || ''''
            FROM unnest(lexemes) AS l (lexeme)
        ),
        ' | '
    )::tsquery;
END;
$$;

COMMENT ON FUNCTION prme._any_lexeme_query(text[]) IS
'Internal: a tsquery matching any of the given (already normalised) lexemes; NULL for none.';

CREATE FUNCTION prme._query_lexemes(user_id text, query text)
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_lexemes text[] := prme._owner_lexemes(user_id, query);
BEGIN
    -- Each matching memory is scored against every lexeme: bound them, so a call's
    -- work grows with the owner's matches, not with the length of the query.
    IF cardinality(v_lexemes) > 1024 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'query must have at most 1024 distinct search terms',
            DETAIL = format('got %s', cardinality(v_lexemes));
    END IF;
    RETURN v_lexemes;
END;
$$;

COMMENT ON FUNCTION prme._query_lexemes(text, text) IS
'Internal: the owner-keyed lexemes of a search query (as nodes.search holds them); PR422 for more than 1024.';

CREATE FUNCTION prme.recall(
    user_id text,
    query text DEFAULT NULL,
    scopes text[] DEFAULT NULL,
    max_count integer DEFAULT 10,
    as_of timestamptz DEFAULT now()
)
RETURNS TABLE (
    rank integer,
    score double precision,
    relevance double precision,
    effective_salience double precision,
    effective_confidence double precision,
    id uuid,
    namespace text,
    scope text,
    kind text,
    content text,
    lifecycle_state text,
    decay_profile text,
    confidence_base numeric,
    salience_base numeric,
    reinforcement_boost numeric,
    last_reinforced_at timestamptz,
    created_at timestamptz,
    updated_at timestamptz,
    version bigint
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(recall.user_id);
    v_scopes text[] := prme._valid_scopes(recall.scopes);
    v_as_of timestamptz := prme._valid_timestamp('as_of', coalesce(recall.as_of, now()));
    v_lexemes text[];
    v_lexeme_count integer;
    v_query tsquery;
BEGIN
    IF recall.max_count IS NULL OR recall.max_count NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 1000';
    END IF;
    IF octet_length(recall.query) > 65536 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'query must be at most 65536 bytes',
            DETAIL = format('got %s bytes', octet_length(recall.query));
    END IF;

    IF recall.query IS NULL OR btrim(recall.query, E' \t\n\r\f\v') = '' THEN
        -- No query: every recallable memory of the owner matches; strength ranks alone.
        RETURN QUERY
        SELECT (row_number() OVER (ORDER BY r.score DESC, r.id))::integer, r.score, r.relevance,
            r.effective_salience, r.effective_confidence, r.id, r.namespace::text, r.scope::text, r.kind::text,
            r.content, r.lifecycle_state::text, r.decay_profile::text, r.confidence_base::numeric,
            r.salience_base::numeric, r.reinforcement_boost::numeric, r.last_reinforced_at, r.created_at,
            r.updated_at, r.version::bigint
        FROM (
            SELECT s.* FROM (
                SELECT d.*, d.relevance * (0.5 + 0.25 * d.effective_salience + 0.25 * d.effective_confidence) AS score
                FROM (
                    SELECT n.id, n.namespace, n.scope, n.kind, n.content, n.lifecycle_state, n.decay_profile,
                        n.confidence_base, n.salience_base, n.reinforcement_boost, n.last_reinforced_at,
                        n.created_at, n.updated_at, n.version, 1.0::double precision AS relevance,
                        prme._effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile,
                            prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                        ) AS effective_salience,
                        prme._effective_confidence(n.confidence_base, n.decay_profile,
                            prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                        ) AS effective_confidence
                    FROM prme.nodes AS n
                    WHERE n.user_id = v_user_id
                      AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                      AND (v_scopes IS NULL OR n.scope = ANY (v_scopes))
                    OFFSET 0  -- a level of its own: each effective value is computed once per row
                ) AS d
            ) AS s
            ORDER BY s.score DESC, s.id
            LIMIT recall.max_count
        ) AS r
        ORDER BY r.score DESC, r.id;
        RETURN;
    END IF;

    v_lexemes := prme._query_lexemes(v_user_id, recall.query);
    v_lexeme_count := cardinality(v_lexemes);
    IF v_lexeme_count = 0 THEN
        RETURN;  -- only stop words and punctuation: nothing can match
    END IF;
    v_query := prme._any_lexeme_query(v_lexemes);

    -- Same shape as above, plus the match and relevance: the memory's lexemes that
    -- are in the query, i.e. all of them minus the rest. The query's lexemes carry
    -- the owner's key, so the GIN index on search finds this owner's matches alone;
    -- the owner test stays outside the inner level, as a recheck (two owners whose
    -- keys collided would share postings), so the planner does not also scan the
    -- owner's rows in the primary key to intersect them.
    RETURN QUERY
    SELECT (row_number() OVER (ORDER BY r.score DESC, r.id))::integer, r.score, r.relevance,
        r.effective_salience, r.effective_confidence, r.id, r.namespace::text, r.scope::text, r.kind::text,
        r.content, r.lifecycle_state::text, r.decay_profile::text, r.confidence_base::numeric,
        r.salience_base::numeric, r.reinforcement_boost::numeric, r.last_reinforced_at, r.created_at,
        r.updated_at, r.version::bigint
    FROM (
        SELECT s.* FROM (
            SELECT d.*, d.relevance * (0.5 + 0.25 * d.effective_salience + 0.25 * d.effective_confidence) AS score
            FROM (
                SELECT n.user_id, n.id, n.namespace, n.scope, n.kind, n.content, n.lifecycle_state, n.decay_profile,
                    n.confidence_base, n.salience_base, n.reinforcement_boost, n.last_reinforced_at,
                    n.created_at, n.updated_at, n.version,
                    (length(n.search) - length(ts_delete(n.search, v_lexemes)))::double precision
                    / v_lexeme_count AS relevance,
                    prme._effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                    ) AS effective_salience,
                    prme._effective_confidence(n.confidence_base, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                    ) AS effective_confidence
                FROM prme.nodes AS n
                WHERE n.search @@ v_query
                  AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                  AND (v_scopes IS NULL OR n.scope = ANY (v_scopes))
                OFFSET 0  -- a level of its own: each effective value is computed once per row
            ) AS d
            WHERE d.user_id = v_user_id
        ) AS s
        ORDER BY s.score DESC, s.id
        LIMIT recall.max_count
    ) AS r
    ORDER BY r.score DESC, r.id;
END;
$$;

COMMENT ON FUNCTION prme.recall(text, text, text[], integer, timestamptz) IS
'Full-text recall over the memories of user_id, best first: relevance (share of the query''s lexemes the memory '
'has) times 0.5 + 0.25 * effective_salience + 0.25 * effective_confidence at as_of (default now; NULL means now), '
'ties by id. A NULL or blank query ranks every memory by strength alone. scopes (NULL = all) filters; max_count is '
'1..1000; the query is at most 64 KiB with at most 1024 distinct lexemes. Archived and deprecated memories are '
'excluded. Nothing is written. See docs/RECALL.md.';

REVOKE ALL ON FUNCTION prme.recall(text, text, text[], integer, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION prme.recall(text, text, text[], integer, timestamptz) TO prme_app;

-- =============================================================================
-- prme-pg: recall (words and meaning, ranked by relevance and virtual decay)
--
-- prme.recall(user_id, query, scopes, max_count, as_of, query_embedding,
-- embedding_model) returns an owner's memories that match the query, best first.
-- Candidates are the memories sharing a word with the query (the GIN index over
-- nodes.search) and, given a query vector, the 100 (or max_count, if more) nearest
-- by meaning among the owner's vectors of that model (pgvector: exact, or by the
-- model's HNSW index for an owner prme.index_embeddings indexed). Then:
--   lexical   = the query's words the memory has, each weighted by its inverse
--               document frequency among the candidates (BM25's idf; memories are
--               short, so no length or term-frequency saturation), over the weight
--               of all the query's words: 1 when it has them all
--   semantic  = cosine similarity of the memory's vector and the query's (0 below 0)
--   relevance = 0.6 * lexical + 0.4 * semantic, or lexical alone without a query vector
--   strength  = (effective_salience + effective_confidence) / 2   (at as_of)
--   score     = relevance * (0.5 + 0.5 * strength)
-- ordered by score descending, then id ascending. Without a query (NULL or blank)
-- every memory matches with relevance 1 and strength ranks alone. Archived and
-- deprecated memories never appear; neither do another owner's. The DuckDB pack
-- computes the same, exactly (docs/RECALL.md). Only the candidates that can reach the
-- top have their cosine read and their row decayed (bounds below), which changes no
-- result.
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

CREATE FUNCTION prme._strength(
    salience_base numeric,
    reinforcement_boost numeric,
    confidence_base numeric,
    decay_profile text,
    decay_from timestamptz,
    as_of timestamptz
)
RETURNS double precision
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN (
    0.5
    + 0.25 * prme._effective_salience(salience_base, reinforcement_boost, decay_profile, prme._age_days(decay_from, as_of))
    + 0.25 * prme._effective_confidence(confidence_base, decay_profile, prme._age_days(decay_from, as_of))
);

COMMENT ON FUNCTION prme._strength(numeric, numeric, numeric, text, timestamptz, timestamptz) IS
'Internal: the strength term of a recall score at as_of, 0.5 + 0.25 * effective_salience + 0.25 * '
'effective_confidence (decayed from decay_from); inlined, the same bits as the score''s own terms.';

CREATE FUNCTION prme._candidate_relevance(
    user_id text,
    model_id text,
    node_id uuid,
    query_vector anyelement,
    share double precision,
    cosine double precision,
    cosine_ceiling double precision
)
RETURNS TABLE (relevance double precision)
LANGUAGE sql
STABLE
PARALLEL SAFE
-- Inlined into recall's statement (a one-row set-returning SQL function with no SET clause),
-- so the stored vector is read only when its cosine is needed. A string body, as the vector
-- column's type is pgvector's or real[] (prme.enable_vector_search changes it), and every
-- name qualified: it is parsed in its caller's search_path. The query vector comes as
-- prme._query_vector gives it (pgvector's vector, or real[]); prme._inner_product, defined
-- for the column's type, computes the cosine.
AS $body$
SELECT CASE
    WHEN $4 IS NULL THEN $5
    -- Parenthesised: written as OPERATOR(...), every operator has the same precedence.
    ELSE (0.6::double precision OPERATOR(pg_catalog.*) $5)
        OPERATOR(pg_catalog.+) (0.4::double precision OPERATOR(pg_catalog.*) greatest(coalesce($6, CASE
            WHEN $7 OPERATOR(pg_catalog.>) 0 THEN (
                SELECT prme._inner_product(v.embedding, $4)
                FROM prme.node_embeddings AS v
                WHERE v.user_id OPERATOR(pg_catalog.=) $1 AND v.model_id OPERATOR(pg_catalog.=) $2
                  AND v.node_id OPERATOR(pg_catalog.=) $3 AND v.embedding IS NOT NULL
            )
        END, 0), 0))
END
$body$;

COMMENT ON FUNCTION prme._candidate_relevance(text, text, uuid, anyelement, double precision, double precision, double precision) IS
'Internal: a recall candidate''s relevance: share without a query vector, else 0.6 * share + 0.4 * its cosine '
'(given, or read from its stored vector when cosine_ceiling is above 0; 0 below 0 or without a vector). query_vector '
'is prme._query_vector(query_embedding).';

-- The candidate list an HNSW search for the wanted nearest gets: twice what is wanted, and
-- a larger graph a longer one for the same share of the true nearest (100,000 vectors: 400
-- kept 0.86 of recall's exact top 10, 1,000 0.94): one per 100 vectors of the graph as
-- VACUUM or ANALYZE last counted them, up to pgvector's 1,000. (20,000 vectors: 200 and 400
-- both gave the exact answers; 200 costs less.)
-- PL/pgSQL, whose plan is kept: as a SQL function with a subquery it was parsed and
-- planned on every call (0.16 ms of each recall).
CREATE FUNCTION prme._hnsw_ef_search(wanted integer, vector_index regclass)
RETURNS integer
LANGUAGE plpgsql
STABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN least(1000, greatest(
        2 * _hnsw_ef_search.wanted,
        (SELECT c.reltuples FROM pg_catalog.pg_class AS c WHERE c.oid = _hnsw_ef_search.vector_index) / 100
    ))::integer;
END;
$$;

COMMENT ON FUNCTION prme._hnsw_ef_search(integer, regclass) IS
'Internal: hnsw.ef_search for finding the wanted nearest through the HNSW index vector_index: twice wanted, or '
'one per 100 vectors of the graph, at most 1,000 (recall; bench/recall_cost_bench.py searches as recall does).';

CREATE FUNCTION prme.recall(
    user_id text,
    query text DEFAULT NULL,
    scopes text[] DEFAULT NULL,
    max_count integer DEFAULT 10,
    as_of timestamptz DEFAULT now(),
    query_embedding real[] DEFAULT NULL,
    embedding_model text DEFAULT NULL
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
    -- A model no memory has a vector of yet is not registered: nothing to compare, so words.
    v_embedding real[] := CASE
        WHEN recall.embedding_model IS NULL OR EXISTS (
            SELECT FROM prme.embedding_models AS m WHERE m.user_id = '*' AND m.model_id = recall.embedding_model
        ) THEN prme._valid_embedding(recall.embedding_model, recall.query_embedding)
    END;
    v_vectors text := prme._vector_schema();
    v_lexemes text[];
    v_wanted integer := greatest(100, recall.max_count);
    v_fetch integer;
    v_scanned integer;
    v_nearest_ids uuid[] := '{}'::uuid[];
    v_nearest_cosines double precision[] := '{}'::double precision[];
    v_cosine_ceiling double precision := 0;
    v_closest text;
    v_any_word tsquery;
    v_word_queries tsquery[];
    v_hnsw text[];
    v_index regclass;
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
    IF v_embedding IS NULL OR v_vectors IS NULL THEN
        IF cardinality(v_lexemes) = 0 THEN
            RETURN;  -- only stop words and punctuation, and no vector: nothing can match
        END IF;
        v_embedding := NULL;  -- lexical relevance alone
    ELSE
        -- The v_wanted nearest recallable memories by inner product (vectors are unit
        -- length: the cosine), ties by id. The closest v_fetch vectors of the owner are
        -- found, each then checked by its primary key; should archived or out-of-scope
        -- memories leave fewer than wanted while more vectors exist, again with as many
        -- more as their share among those found says, a quarter over (at most four times
        -- as many). They are found by a scan of the owner's vectors (exact), or, for
        -- an owner whose vectors prme.index_embeddings moved into the model's HNSW index,
        -- by the index (approximate) and a scan of those stored since. The index's search
        -- repeats its expression (the vector cast to the model's dimensions) and its
        -- predicate, the model id a literal. pgvector's operators are qualified with its
        -- schema.
        v_index := to_regclass('prme.' || quote_ident(prme._vector_index(recall.embedding_model)));
        IF v_index IS NOT NULL
           AND EXISTS (
               SELECT FROM prme.node_embeddings AS v
               WHERE v.user_id = v_user_id AND v.model_id = recall.embedding_model AND v.indexed
           ) THEN
            v_closest := format(
                $sql$
                SELECT a.node_id, a.distance FROM (
                    SELECT v.node_id, (v.embedding::%1$s.vector(%2$s)) OPERATOR(%1$s.<#>) $4::%1$s.vector(%2$s) AS distance
                    FROM prme.node_embeddings AS v
                    WHERE v.model_id = %3$L AND v.indexed AND v.user_id = $1
                    ORDER BY distance
                    LIMIT $6
                ) AS a
                UNION ALL
                SELECT b.node_id, b.distance FROM (
                    SELECT v.node_id, v.embedding OPERATOR(%1$s.<#>) $4::%1$s.vector AS distance
                    FROM prme.node_embeddings AS v
                    WHERE v.model_id = $2 AND v.user_id = $1 AND NOT v.indexed AND v.embedding IS NOT NULL
                    ORDER BY distance, v.node_id
                    LIMIT $6
                ) AS b
                ORDER BY distance, node_id
                LIMIT $6
                $sql$,
                v_vectors, cardinality(v_embedding), recall.embedding_model
            );
            -- The index's candidate list (prme._hnsw_ef_search), and its scan going on past
            -- other owners' vectors (pgvector 0.8's iterative scan, in exact order); the
            -- caller's settings are put back after the search.
            v_hnsw := ARRAY[
                coalesce(current_setting('hnsw.ef_search', TRUE), '40'),
                coalesce(current_setting('hnsw.iterative_scan', TRUE), 'off')
            ];
            PERFORM set_config('hnsw.ef_search', prme._hnsw_ef_search(v_wanted, v_index)::text, TRUE),
                set_config('hnsw.iterative_scan', 'strict_order', TRUE);
        ELSE
            v_closest := format(
                $sql$
                SELECT v.node_id, v.embedding OPERATOR(%1$s.<#>) $4::%1$s.vector AS distance
                FROM prme.node_embeddings AS v
                WHERE v.user_id = $1 AND v.model_id = $2 AND v.embedding IS NOT NULL
                ORDER BY distance, v.node_id
                LIMIT $6
                $sql$,
                v_vectors
            );
        END IF;
        -- Room for archived ones (an owner whose memories are replaced, as the LangGraph
        -- store's items are, keeps the old versions' vectors): with a tenth, a search over
        -- a graph one tenth archived was done twice for two questions in three.
        v_fetch := v_wanted + greatest(10, v_wanted / 4);
        LOOP
            EXECUTE format(
                $sql$
                WITH closest AS MATERIALIZED (%s)
                SELECT coalesce(array_agg(r.node_id ORDER BY r.distance, r.node_id), '{}'),
                    coalesce(array_agg(-r.distance ORDER BY r.distance, r.node_id), '{}'),
                    (SELECT count(*) FROM closest)::integer
                FROM (
                    SELECT c.node_id, c.distance FROM closest AS c
                    WHERE EXISTS (
                        SELECT FROM prme.nodes AS n
                        WHERE n.user_id = $1 AND n.id = c.node_id
                          AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                          AND ($3 IS NULL OR n.scope = ANY ($3))
                    )
                    ORDER BY c.distance, c.node_id
                    LIMIT $5
                ) AS r
                $sql$,
                v_closest
            ) INTO v_nearest_ids, v_nearest_cosines, v_scanned
            USING v_user_id, recall.embedding_model, v_scopes, v_embedding, v_wanted, v_fetch;
            EXIT WHEN cardinality(v_nearest_ids) >= v_wanted OR v_scanned < v_fetch;
            v_fetch := least(4 * v_fetch, greatest(v_fetch + 10,
                ceil(1.25 * v_fetch * v_wanted / greatest(cardinality(v_nearest_ids), 1))::integer
            ));
        END LOOP;
        IF v_hnsw IS NOT NULL THEN
            PERFORM set_config('hnsw.ef_search', v_hnsw[1], TRUE), set_config('hnsw.iterative_scan', v_hnsw[2], TRUE);
        END IF;
        -- Every other recallable vector is at most as close as the last of a full set
        -- (by the index: about as close); with fewer, the owner has no other: a candidate
        -- outside the set has cosine 0.
        IF cardinality(v_nearest_ids) >= v_wanted THEN
            v_cosine_ceiling := v_nearest_cosines[cardinality(v_nearest_cosines)];
        END IF;
    END IF;

    -- A tsquery matching any of the query's words, and one per word, to tell which of
    -- them each matched memory has.
    v_any_word := prme._any_lexeme_query(v_lexemes);
    v_word_queries := ARRAY(SELECT prme._any_lexeme_query(ARRAY[l.lexeme]) FROM unnest(v_lexemes) AS l (lexeme));

    -- Static SQL, so PostgreSQL keeps its plan from call to call (planning it took as long
    -- as running it); it names nothing of pgvector's: a finalist's cosine is read through
    -- prme._inner_product and prme._query_vector, defined with pgvector's schema (305).
    -- The query's words carry the owner's key, so the GIN index on search finds this
    -- owner's matches alone; the owner test stays outside the inner level, as a recheck
    -- (two owners whose keys collided would share postings), so the planner does not
    -- also scan the owner's rows in the primary key to intersect them.
    RETURN QUERY
        WITH
        -- The memories sharing a word with the query, each with the strength term of its
        -- score (below), from the row the word index found.
        matched AS MATERIALIZED (
            SELECT m.id, m.search, m.strength FROM (
                SELECT n.user_id, n.id, n.search,
                    prme._strength(n.salience_base, n.reinforcement_boost, n.confidence_base, n.decay_profile,
                        coalesce(n.last_reinforced_at, n.created_at), v_as_of) AS strength
                FROM prme.nodes AS n
                WHERE n.search @@ v_any_word
                  AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                  AND (v_scopes IS NULL OR n.scope = ANY (v_scopes))
                OFFSET 0
            ) AS m
            WHERE m.user_id = v_user_id
        ),
        nearest AS (
            SELECT u.id, u.cosine FROM unnest(v_nearest_ids, v_nearest_cosines) AS u (id, cosine)
        ),
        -- The query vector converted once, for prme._inner_product.
        query AS MATERIALIZED (
            SELECT prme._query_vector(v_embedding) AS vector
        ),
        candidates AS MATERIALIZED (
            SELECT coalesce(m.id, s.id) AS id, m.strength, s.cosine
            FROM matched AS m FULL JOIN nearest AS s ON s.id = m.id
        ),
        -- Each matched memory with each of the query's words it has: one tsquery per word.
        pairs AS MATERIALIZED (
            SELECT m.id, q.word
            FROM matched AS m, unnest(v_lexemes, v_word_queries) AS q (word, query)
            WHERE m.search @@ q.query
        ),
        -- BM25's idf of each of the query's words among the candidates (a word no
        -- candidate has weighs the most, and lowers every memory's share alike), in
        -- double precision as the pack computes it.
        weights AS (
            SELECT q.word,
                ln(1 + ((SELECT count(*) FROM candidates)::double precision - count(p.id) + 0.5) / (count(p.id) + 0.5))
                    AS weight
            FROM unnest(v_lexemes) AS q (word)
            LEFT JOIN pairs AS p ON p.word = q.word
            GROUP BY q.word
        ),
        lexical AS (
            SELECT p.id, sum(w.weight) / (SELECT sum(a.weight) FROM weights AS a) AS share
            FROM pairs AS p JOIN weights AS w ON w.word = p.word
            GROUP BY p.id
        ),
        -- Each candidate's score between two bounds. Its relevance is exact when its cosine
        -- is known (one of the nearest) or not needed; else at least that with cosine 0 and
        -- at most that with the cosine of the last of the nearest (no other is closer;
        -- negative cosines count as 0). Its strength is known when its words matched; else
        -- it is between 0.5 and 1. Then the candidates by ceiling, highest first.
        bounded AS MATERIALIZED (
            SELECT x.*, row_number() OVER (ORDER BY x.score_ceiling DESC, x.id) AS position
            FROM (
                SELECT c.id, c.cosine, c.strength, coalesce(l.share, 0) AS share,
                    coalesce(c.strength, 1.0) * CASE WHEN v_embedding IS NULL THEN coalesce(l.share, 0)
                         ELSE 0.6 * coalesce(l.share, 0) + 0.4 * greatest(coalesce(c.cosine, v_cosine_ceiling), 0)
                    END AS score_ceiling
                FROM candidates AS c
                LEFT JOIN lexical AS l ON l.id = c.id
            ) AS x
        ),
        -- The probe: the exact relevance of the 2 * max_count + 10 candidates with the highest
        -- ceilings (a cosine above the last of the nearest, which the HNSW index, being
        -- approximate, may have missed, counts as that).
        probe AS MATERIALIZED (
            SELECT b.id, b.score_ceiling, e.relevance, coalesce(b.strength, (
                    SELECT prme._strength(n.salience_base, n.reinforcement_boost, n.confidence_base, n.decay_profile,
                        coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                    FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = b.id
                )) AS strength
            FROM bounded AS b
            CROSS JOIN query AS q
            CROSS JOIN LATERAL prme._candidate_relevance(
                v_user_id, recall.embedding_model, b.id, q.vector, b.share, b.cosine, v_cosine_ceiling
            ) AS e
            WHERE b.position <= 2 * recall.max_count + 10
        ),
        -- max_count of them score at least the max_count-th best of their scores (0 with
        -- fewer), so a candidate whose ceiling is below that cannot be among the best: only
        -- the others have their cosine read (when not known) and their row read, each by its
        -- primary key.
        threshold AS (
            SELECT coalesce((
                SELECT s.score FROM (
                    SELECT least(p.score_ceiling, p.relevance * p.strength) AS score FROM probe AS p
                ) AS s
                ORDER BY s.score DESC OFFSET recall.max_count - 1 LIMIT 1
            ), 0) AS score
        ),
        finalists AS (
            SELECT p.id, p.relevance FROM probe AS p WHERE p.score_ceiling >= (SELECT t.score FROM threshold AS t)
            UNION ALL
            SELECT b.id, e.relevance
            FROM bounded AS b
            CROSS JOIN query AS q
            CROSS JOIN LATERAL prme._candidate_relevance(
                v_user_id, recall.embedding_model, b.id, q.vector, b.share, b.cosine, v_cosine_ceiling
            ) AS e
            WHERE b.position > 2 * recall.max_count + 10 AND b.score_ceiling >= (SELECT t.score FROM threshold AS t)
        )
        SELECT (row_number() OVER (ORDER BY r.score DESC, r.id))::integer, r.score, r.relevance,
            r.effective_salience, r.effective_confidence, r.id, r.namespace::text, r.scope::text, r.kind::text,
            r.content, r.lifecycle_state::text, r.decay_profile::text, r.confidence_base::numeric,
            r.salience_base::numeric, r.reinforcement_boost::numeric, r.last_reinforced_at, r.created_at,
            r.updated_at, r.version::bigint
        FROM (
            SELECT d.*, d.relevance * (0.5 + 0.25 * d.effective_salience + 0.25 * d.effective_confidence) AS score
            FROM (
                SELECT n.id, n.namespace, n.scope, n.kind, n.content, n.lifecycle_state, n.decay_profile,
                    n.confidence_base, n.salience_base, n.reinforcement_boost, n.last_reinforced_at,
                    n.created_at, n.updated_at, n.version, f.relevance::double precision AS relevance,
                    prme._effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                    ) AS effective_salience,
                    prme._effective_confidence(n.confidence_base, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                    ) AS effective_confidence
                FROM finalists AS f
                -- Each candidate by its primary key: a join would read all of the owner's rows.
                CROSS JOIN LATERAL (
                    SELECT m.* FROM prme.nodes AS m WHERE m.user_id = v_user_id AND m.id = f.id OFFSET 0
                ) AS n
                OFFSET 0  -- a level of its own: each effective value is computed once per row
            ) AS d
            ORDER BY score DESC, d.id
            LIMIT recall.max_count
        ) AS r
        ORDER BY r.score DESC, r.id;
END;
$$;

COMMENT ON FUNCTION prme.recall(text, text, text[], integer, timestamptz, real[], text) IS
'Recall over the memories of user_id, best first: relevance (the idf-weighted share of the query''s words the '
'memory has, fused 0.6/0.4 with the cosine similarity of query_embedding when it is given, of model '
'embedding_model, and the server has pgvector; by the model''s HNSW index, approximate, for an owner whose vectors '
'prme.index_embeddings indexed) times 0.5 + 0.25 * effective_salience + 0.25 * '
'effective_confidence at as_of (default now; NULL means now), ties by id. A NULL or blank query ranks every memory '
'by strength alone. scopes (NULL = all) filters; max_count is 1..1000; the query is at most 64 KiB with at most 1024 '
'distinct words. Archived and deprecated memories are excluded. Nothing is written. See docs/RECALL.md.';

REVOKE ALL ON FUNCTION prme.recall(text, text, text[], integer, timestamptz, real[], text) FROM public;
GRANT EXECUTE ON FUNCTION prme.recall(text, text, text[], integer, timestamptz, real[], text) TO prme_app;

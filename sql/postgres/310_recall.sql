-- =============================================================================
-- prme-pg: recall (words and meaning, ranked by relevance and virtual decay)
--
-- prme.recall(user_id, query, scopes, max_count, as_of, query_embedding,
-- embedding_model) returns an owner's memories that match the query, best first.
-- Candidates are the memories sharing a word with the query (the GIN index over
-- nodes.search) and, given a query vector, the 100 (or max_count, if more) nearest
-- by meaning among the owner's vectors of that model (pgvector, exact). Then:
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
-- computes the same (docs/RECALL.md).
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
    v_nearest text;
    v_similarity text;
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
        -- No similarity: an empty "nearest" set, and no vector is read.
        v_nearest := 'nearest AS (SELECT NULL::uuid AS id WHERE FALSE),';
        v_similarity := 'similarity AS (SELECT NULL::uuid AS id, NULL::double precision AS cosine WHERE FALSE),';
    ELSE
        -- The nearest memories by inner product (vectors are unit length: the cosine),
        -- exact over the owner's vectors of the model, ties by id; then the similarity
        -- of every candidate. pgvector's operator is qualified with its schema.
        v_nearest := format(
            $sql$
            nearest AS MATERIALIZED (
                SELECT e.node_id AS id
                FROM (
                    SELECT v.node_id, v.embedding OPERATOR(%1$s.<#>) $6::%1$s.vector AS distance
                    FROM prme.node_embeddings AS v
                    WHERE v.user_id = $1 AND v.model_id = $5 AND v.embedding IS NOT NULL
                    ORDER BY distance, v.node_id
                ) AS e
                -- In distance order, each checked by its primary key until enough are found:
                -- the owner's rows are not read as a whole for the lifecycle and scope.
                CROSS JOIN LATERAL (
                    SELECT FROM prme.nodes AS n
                    WHERE n.user_id = $1 AND n.id = e.node_id
                      AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                      AND ($3 IS NULL OR n.scope = ANY ($3))
                ) AS recallable
                LIMIT greatest(100, $7)
            ),
            $sql$,
            v_vectors
        );
        v_similarity := format(
            $sql$
            similarity AS (
                SELECT c.id, -(e.embedding OPERATOR(%1$s.<#>) $6::%1$s.vector)::double precision AS cosine
                FROM candidates AS c
                CROSS JOIN LATERAL (
                    SELECT v.embedding FROM prme.node_embeddings AS v
                    WHERE v.user_id = $1 AND v.model_id = $5 AND v.node_id = c.id AND v.embedding IS NOT NULL
                ) AS e
            ),
            $sql$,
            v_vectors
        );
    END IF;

    -- The query's words carry the owner's key, so the GIN index on search finds this
    -- owner's matches alone; the owner test stays outside the inner level, as a recheck
    -- (two owners whose keys collided would share postings), so the planner does not
    -- also scan the owner's rows in the primary key to intersect them.
    RETURN QUERY EXECUTE format(
        $sql$
        WITH
        matched AS MATERIALIZED (
            SELECT m.id, m.search FROM (
                SELECT n.user_id, n.id, n.search
                FROM prme.nodes AS n
                WHERE n.search @@ prme._any_lexeme_query($2)
                  AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                  AND ($3 IS NULL OR n.scope = ANY ($3))
                OFFSET 0
            ) AS m
            WHERE m.user_id = $1
        ),
        %s
        candidates AS (
            SELECT matched.id FROM matched UNION SELECT nearest.id FROM nearest
        ),
        %s
        pairs AS (
            SELECT m.id, w.word
            FROM matched AS m, unnest(tsvector_to_array(m.search)) AS w (word)
            WHERE w.word = ANY ($2)
        ),
        -- BM25's idf of each of the query's words among the candidates (a word no
        -- candidate has weighs the most, and lowers every memory's share alike), in
        -- double precision as the pack computes it.
        weights AS (
            SELECT q.word,
                ln(1 + ((SELECT count(*) FROM candidates)::double precision - count(p.id) + 0.5) / (count(p.id) + 0.5))
                    AS weight
            FROM unnest($2) AS q (word)
            LEFT JOIN pairs AS p ON p.word = q.word
            GROUP BY q.word
        ),
        lexical AS (
            SELECT p.id, sum(w.weight) / (SELECT sum(a.weight) FROM weights AS a) AS share
            FROM pairs AS p JOIN weights AS w ON w.word = p.word
            GROUP BY p.id
        ),
        scored AS (
            SELECT c.id,
                CASE WHEN $6 IS NULL THEN coalesce(l.share, 0)
                     ELSE 0.6::double precision * coalesce(l.share, 0)
                          + 0.4::double precision * greatest(coalesce(s.cosine, 0), 0)
                END AS relevance
            FROM candidates AS c
            LEFT JOIN lexical AS l ON l.id = c.id
            LEFT JOIN similarity AS s ON s.id = c.id
        ),
        -- A score is between half its relevance and all of it (strength is in [0, 1]), so a
        -- candidate below half the max_count-th best relevance cannot be among the best:
        -- only the others have their rows read and their decay computed.
        contenders AS (
            SELECT sc.id, sc.relevance FROM scored AS sc
            WHERE sc.relevance >= 0.5 * coalesce(
                (SELECT b.relevance FROM scored AS b ORDER BY b.relevance DESC OFFSET $7 - 1 LIMIT 1), 0
            )
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
                    n.created_at, n.updated_at, n.version, sc.relevance::double precision AS relevance,
                    prme._effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), $4)
                    ) AS effective_salience,
                    prme._effective_confidence(n.confidence_base, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), $4)
                    ) AS effective_confidence
                FROM contenders AS sc
                -- Each candidate by its primary key: a join would read all of the owner's rows.
                CROSS JOIN LATERAL (
                    SELECT m.* FROM prme.nodes AS m WHERE m.user_id = $1 AND m.id = sc.id
                ) AS n
                OFFSET 0  -- a level of its own: each effective value is computed once per row
            ) AS d
            ORDER BY score DESC, d.id
            LIMIT $7
        ) AS r
        ORDER BY r.score DESC, r.id
        $sql$,
        v_nearest, v_similarity
    ) USING v_user_id, v_lexemes, v_scopes, v_as_of, recall.embedding_model, v_embedding, recall.max_count;
END;
$$;

COMMENT ON FUNCTION prme.recall(text, text, text[], integer, timestamptz, real[], text) IS
'Recall over the memories of user_id, best first: relevance (the idf-weighted share of the query''s words the '
'memory has, fused 0.6/0.4 with the cosine similarity of query_embedding when it is given, of model '
'embedding_model, and the server has pgvector) times 0.5 + 0.25 * effective_salience + 0.25 * '
'effective_confidence at as_of (default now; NULL means now), ties by id. A NULL or blank query ranks every memory '
'by strength alone. scopes (NULL = all) filters; max_count is 1..1000; the query is at most 64 KiB with at most 1024 '
'distinct words. Archived and deprecated memories are excluded. Nothing is written. See docs/RECALL.md.';

REVOKE ALL ON FUNCTION prme.recall(text, text, text[], integer, timestamptz, real[], text) FROM public;
GRANT EXECUTE ON FUNCTION prme.recall(text, text, text[], integer, timestamptz, real[], text) TO prme_app;

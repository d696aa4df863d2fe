-- Proposal (issue 31, item 4): recall's nearest memories by meaning through an HNSW index.
-- NOT APPLIED: the lead decides. Measured by `.venv/bin/python bench/vector_search_bench.py`
-- (2026-12-07 00:43 UTC; 10,000 memories of one owner, ~100-character texts, wordllama 256
-- dims, pgvector 0.8.0, PostgreSQL 15; 2 shared cores at load average 3.7 to 4.6; 120 calls
-- per row side by side in one run; vectors sent as the client sends them, binary float4[]):
--
--   nearest 100 (the CTE alone)                        p50 ms   p95 ms   overlap with exact @100
--   exact, as 310_recall.sql (join nodes, tie-break)    42.7     64.0     1.000
--   exact, the vectors alone (no join to nodes)         15.1     23.4     0.997 (ties)
--   HNSW, ef_search 100                                  6.8      9.9     0.863
--   HNSW, ef_search 200 (this file)                      8.3     13.6     0.935
--   exact halfvec(256), vectors alone                   13.9     25.4     0.996
--   exact wordllama-128, vectors alone                  14.1     22.7     0.681 (another ranking)
--   exact wordllama-64, vectors alone                    9.6     15.6     0.505 (another ranking)
--
--   whole recall, hybrid, max_count 10                  p50 ms   p95 ms   top 10 shared with exact
--   prme.recall of 310_recall.sql (exact)              108.0    170.9     1.000
--   this file (HNSW, ef_search 200)                     59.4    119.9     0.988  (0.55x the time)
--   words only (no vector)                              35.7     70.2     0.294
-- The HNSW graph differs per build: a run at load 6.4 (30 calls) measured 105.4 vs 68.2 ms,
-- top 10 identical for 64 of 64 questions, overlap @100 0.979; one at load 4.0 (6 calls)
-- 44.7 vs 30.0 ms (0.67x), top 10 0.988, overlap @100 0.877.
--
-- What changes: the nearest CTE orders by the vector cast to the model's dimensions, without
-- the node_id tie-break (an ORDER BY with a second key cannot use the index), so a partial
-- HNSW index per model serves it; the candidate set it yields is then ranked exactly as before
-- (ties among the 100 do not matter: it is a set). hnsw.ef_search must be >= the LIMIT
-- (greatest(100, max_count)): with the default 40 an HNSW scan returns at most 40 rows.
-- hnsw.iterative_scan = relaxed_order (0.8) keeps scanning when other owners' vectors are
-- filtered out: without it, an owner with few of a large table's vectors gets few or none.
-- Costs: the index is 9.3 MB for 10,000 vectors (the heap 11 MB) and took 4.9 s to build;
-- every stored vector pays an HNSW insert. max_count above ef_search (1000 allowed) needs
-- ef_search raised per call, or the exact path. Approximate means the engines can differ:
-- the pack scans exactly, so the conformance tests comparing both engines by meaning would
-- need a tolerance (top 10 shared 0.988 here), or a small owner (say < 1,000 vectors) kept on
-- the exact path. Not measured: many owners sharing the index (the filter on user_id then
-- relies on iterative_scan).
--
-- One index per registered model (the dimensions and the model id are the model's):
CREATE INDEX node_embeddings_hnsw_wordllama_256 ON prme.node_embeddings
USING hnsw ((embedding::vector(256)) vector_ip_ops)
WHERE model_id = 'wordllama-l2_supercat-256';

CREATE OR REPLACE FUNCTION prme.recall(
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
SET hnsw.ef_search = 200
SET hnsw.iterative_scan = relaxed_order
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(recall.user_id);
    v_scopes text[] := prme._valid_scopes(recall.scopes);
    v_as_of timestamptz := prme._valid_timestamp('as_of', coalesce(recall.as_of, now()));
    v_embedding real[] := prme._valid_embedding(recall.embedding_model, recall.query_embedding);
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
                FROM prme.node_embeddings AS e
                JOIN prme.nodes AS n ON n.user_id = e.user_id AND n.id = e.node_id
                WHERE e.user_id = $1 AND e.model_id = $5 AND e.embedding IS NOT NULL
                  AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                  AND ($3 IS NULL OR n.scope = ANY ($3))
                ORDER BY e.embedding::%1$s.vector(%2$s) OPERATOR(%1$s.<#>) $6::%1$s.vector(%2$s)
                LIMIT greatest(100, $7)
            ),
            $sql$,
            v_vectors, cardinality(v_embedding)
        );
        v_similarity := format(
            $sql$
            similarity AS (
                SELECT e.node_id AS id,
                    -(e.embedding OPERATOR(%1$s.<#>) $6::%1$s.vector)::double precision AS cosine
                FROM prme.node_embeddings AS e
                WHERE e.user_id = $1 AND e.model_id = $5 AND e.embedding IS NOT NULL
                  AND e.node_id IN (SELECT c.id FROM candidates AS c)
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
                FROM scored AS sc
                JOIN prme.nodes AS n ON n.user_id = $1 AND n.id = sc.id
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


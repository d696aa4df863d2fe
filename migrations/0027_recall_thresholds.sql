-- prme-pg migration 0027_recall_thresholds: recall reads and decays fewer candidates, and the
-- HNSW index finds the nearest (issue 31, item 8).
--
-- Recall (0025) bounded each candidate's relevance and kept those within half of the
-- max_count-th best lower bound, the factor of two standing for strength, which it did not
-- know before reading the row: about half of the candidates had their cosine read and a
-- third their row decayed. Now each candidate also carries a ceiling of its strength term,
-- taken from its bases in the row the word match read anyway (decay only lowers them), and
-- the few candidates with the highest score ceilings (2 * max_count + 10, the probe) are
-- scored exactly first: their max_count-th best score is a threshold no candidate whose
-- ceiling is below it can cross. Only the rest have their cosine read and their row decayed
-- -- about 30 at max_count 10. An owner's vectors scanned exactly give the same answers as
-- 0026 (the last of the nearest is a true ceiling of every other cosine).
--
-- By the HNSW index that ceiling holds only as far as the index finds the nearest; a probe
-- score above its ceiling counts as the ceiling. An index built with pgvector's default
-- ef_construction (64) held, on bench/semantic_bench.py's corpus, 88 % of the exact 100
-- nearest and for some questions none; prme.index_embeddings now builds with
-- ef_construction 200 (99 %, at least 91 % per question, at the same ef_search 400). Indexes
-- built before take 200 below for the vectors inserted from now on; REINDEX INDEX
-- CONCURRENTLY prme.node_embeddings_hnsw_... rebuilds one whole with it.
-- bench/recall_cost_bench.py compares recall with 0026's on one database.
--
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0027_recall_thresholds.sql
-- (or prme-pg migrate). It replaces functions and sets a storage parameter of each HNSW index
-- prme.index_embeddings built: locks held for a moment, nothing rewritten.
-- Its bodies are copied from sql/postgres/305_embeddings.sql and sql/postgres/310_recall.sql.

SET LOCAL ROLE prme_owner;

DO $indexes$
DECLARE
    v_index regclass;
BEGIN
    FOR v_index IN
        SELECT i.indexrelid::regclass
        FROM pg_catalog.pg_index AS i
        INNER JOIN pg_catalog.pg_class AS c ON i.indexrelid = c.oid
        WHERE i.indrelid = 'prme.node_embeddings'::regclass AND c.relname LIKE 'node\_embeddings\_hnsw\_%'
    LOOP
        EXECUTE pg_catalog.format('ALTER INDEX %s SET (ef_construction = 200)', v_index);
    END LOOP;
END
$indexes$;

-- >>> sql/postgres/305_embeddings.sql

CREATE OR REPLACE FUNCTION prme.index_embeddings(
    model_id text DEFAULT NULL,
    min_vectors integer DEFAULT 5000,
    max_count integer DEFAULT 2000
)
RETURNS TABLE (indexed integer)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_vectors text := prme._vector_schema();
    v_index text := prme._vector_index(index_embeddings.model_id);
    v_dimensions integer;
    v_first boolean;
    v_indexed integer := 0;
    v_model text;
BEGIN
    IF index_embeddings.min_vectors IS NULL OR index_embeddings.min_vectors NOT BETWEEN 1 AND 1000000000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'min_vectors must be between 1 and 1000000000';
    END IF;
    IF index_embeddings.max_count IS NULL OR index_embeddings.max_count NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 100000';
    END IF;
    IF index_embeddings.model_id IS NULL THEN
        -- Every registered model in turn (what a scheduled job runs: it knows no model).
        FOR v_model IN
            SELECT m.model_id FROM prme.embedding_models AS m WHERE m.user_id = '*' ORDER BY m.model_id
        LOOP
            v_indexed := v_indexed + (
                SELECT i.indexed
                FROM prme.index_embeddings(v_model, index_embeddings.min_vectors, index_embeddings.max_count) AS i
            );
        END LOOP;
        RETURN QUERY SELECT v_indexed;
        RETURN;
    END IF;
    SELECT m.dimensions INTO v_dimensions
    FROM prme.embedding_models AS m
    WHERE m.user_id = '*' AND m.model_id = index_embeddings.model_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('unknown embedding model %s', quote_literal(left(index_embeddings.model_id, 200))),
            HINT = 'register it first with prme.register_embedding_model(model_id, dimensions)';
    END IF;
    -- No pgvector: recall matches words. Before 0.8 its HNSW scans stop at hnsw.ef_search
    -- rows, so other owners' vectors would crowd an owner's out: recall scans instead.
    IF v_vectors IS NULL OR (
        SELECT (regexp_match(e.extversion, '^([0-9]+)[.]([0-9]+)'))::integer[] < ARRAY[0, 8]
        FROM pg_catalog.pg_extension AS e WHERE e.extname = 'vector'
    ) THEN
        RETURN QUERY SELECT 0;
        RETURN;
    END IF;
    -- The model's index is built over the first max_count vectors moved, and every later
    -- one is inserted into it: each call's work, and the SHARE lock of the build (vector
    -- writes wait for it), stay bounded whatever the owners hold.
    v_first := to_regclass('prme.' || quote_ident(v_index)) IS NULL;

    -- An owner qualifies with min_vectors unindexed vectors (an owner none of whose
    -- vectors is indexed has only those) or when some of its vectors are indexed already.
    WITH owners AS (
        SELECT u.user_id FROM (
            SELECT v.user_id, count(*) AS unindexed
            FROM prme.node_embeddings AS v
            WHERE v.model_id = index_embeddings.model_id AND NOT v.indexed AND v.embedding IS NOT NULL
            GROUP BY v.user_id
        ) AS u
        WHERE u.unindexed >= index_embeddings.min_vectors
           OR EXISTS (
               SELECT FROM prme.node_embeddings AS i
               WHERE i.user_id = u.user_id AND i.model_id = index_embeddings.model_id AND i.indexed
           )
    ),
    picked AS (
        SELECT v.user_id, v.node_id
        FROM owners AS o
        INNER JOIN prme.node_embeddings AS v
            ON v.model_id = index_embeddings.model_id AND v.user_id = o.user_id
        WHERE NOT v.indexed AND v.embedding IS NOT NULL
        LIMIT index_embeddings.max_count
        FOR UPDATE OF v SKIP LOCKED
    )
    UPDATE prme.node_embeddings AS e SET indexed = TRUE
    FROM picked AS p
    WHERE e.user_id = p.user_id AND e.model_id = index_embeddings.model_id AND e.node_id = p.node_id;
    GET DIAGNOSTICS v_indexed = ROW_COUNT;

    IF v_first AND v_indexed > 0 THEN
        -- Inner product on unit vectors is the cosine; the cast gives the column the
        -- model's dimensions, which an HNSW index needs. Recall's query repeats it. A graph
        -- built with pgvector's default ef_construction (64) missed most of the nearest for
        -- some questions; with 200 its searches find them for about the same cost
        -- (docs/RECALL.md, "Scale"), each insert costing more, in the background.
        EXECUTE format(
            'CREATE INDEX %I ON prme.node_embeddings USING hnsw ((embedding::%s.vector(%s)) %s.vector_ip_ops) '
            'WITH (m = 16, ef_construction = 200) WHERE model_id = %L AND indexed',
            v_index, v_vectors, v_dimensions, v_vectors, index_embeddings.model_id
        );
        -- Most of the model's rows changed side at once: plan recall with that known.
        ANALYZE prme.node_embeddings;
    END IF;
    RETURN QUERY SELECT v_indexed;
END;
$$;

COMMENT ON FUNCTION prme.index_embeddings(text, integer, integer) IS
'Moves vectors of model_id (NULL: of every registered model) into the model''s HNSW index: those of every owner with '
'at least min_vectors of them, and those stored since for owners already indexed, at most max_count per call and '
'model (the index is built over the first ones). Returns how many moved (0: nothing left, or no '
'pgvector 0.8). Recall by meaning is exact for the other owners and approximate (the index''s) for these. For the '
'embedding worker and a scheduled job; see docs/RECALL.md, "Scale".';

-- >>> sql/postgres/310_recall.sql

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
    v_hnsw text[];
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
        -- memories leave fewer than wanted while more vectors exist, again with four
        -- times as many. They are found by a scan of the owner's vectors (exact), or, for
        -- an owner whose vectors prme.index_embeddings moved into the model's HNSW index,
        -- by the index (approximate) and a scan of those stored since. The index's search
        -- repeats its expression (the vector cast to the model's dimensions) and its
        -- predicate, the model id a literal. pgvector's operators are qualified with its
        -- schema.
        IF to_regclass('prme.' || quote_ident(prme._vector_index(recall.embedding_model))) IS NOT NULL
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
            -- The index's candidate list must hold what is asked for, and its scan go on
            -- past other owners' vectors (pgvector 0.8's iterative scan, in exact order);
            -- the caller's settings are put back after the search.
            v_hnsw := ARRAY[
                coalesce(current_setting('hnsw.ef_search', TRUE), '40'),
                coalesce(current_setting('hnsw.iterative_scan', TRUE), 'off')
            ];
            PERFORM set_config('hnsw.ef_search', greatest(400, least(1000, 4 * v_wanted))::text, TRUE),
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
        v_fetch := v_wanted + greatest(10, v_wanted / 10);  -- room for a few archived ones
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
            v_fetch := 4 * v_fetch;
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

    -- The query's words carry the owner's key, so the GIN index on search finds this
    -- owner's matches alone; the owner test stays outside the inner level, as a recheck
    -- (two owners whose keys collided would share postings), so the planner does not
    -- also scan the owner's rows in the primary key to intersect them.
    RETURN QUERY EXECUTE format(
        $sql$
        WITH
        matched AS MATERIALIZED (
            SELECT m.id, m.search, m.strength_ceiling FROM (
                SELECT n.user_id, n.id, n.search,
                    -- Decay only lowers salience and confidence: the strength term of the
                    -- score (below) is at most this, computed from the row's bases alone.
                    0.5::double precision
                    + 0.25::double precision * least(
                        1.0::double precision, n.salience_base::double precision + n.reinforcement_boost::double precision
                    )
                    + 0.25::double precision * least(1.0::double precision, n.confidence_base::double precision)
                        AS strength_ceiling
                FROM prme.nodes AS n
                WHERE n.search @@ prme._any_lexeme_query($2)
                  AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                  AND ($3 IS NULL OR n.scope = ANY ($3))
                OFFSET 0
            ) AS m
            WHERE m.user_id = $1
        ),
        nearest AS (
            SELECT u.id, u.cosine FROM unnest($8::uuid[], $9::double precision[]) AS u (id, cosine)
        ),
        candidates AS MATERIALIZED (
            SELECT coalesce(m.id, s.id) AS id, coalesce(m.strength_ceiling, 1.0::double precision) AS strength_ceiling,
                s.cosine
            FROM matched AS m FULL JOIN nearest AS s ON s.id = m.id
        ),
        -- Each matched memory with each of the query's words it has: one tsquery per word.
        pairs AS MATERIALIZED (
            SELECT m.id, q.word
            FROM matched AS m, unnest($2, $11) AS q (word, query)
            WHERE m.search @@ q.query
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
        -- Each candidate's relevance, exact when its cosine is known (or not needed), else
        -- at least with cosine 0; and a ceiling of its score: the nearest have their cosine,
        -- any other's is at most the ceiling (negative cosines count as 0), and the strength
        -- term is at most the candidate's strength ceiling.
        bounded AS MATERIALIZED (
            SELECT c.id, coalesce(l.share, 0) AS share, c.cosine,
                CASE WHEN $6 IS NULL THEN coalesce(l.share, 0)
                     ELSE 0.6::double precision * coalesce(l.share, 0)
                          + 0.4::double precision * greatest(coalesce(c.cosine, 0), 0)
                END AS lower_relevance,
                c.strength_ceiling * CASE WHEN $6 IS NULL THEN coalesce(l.share, 0)
                     ELSE 0.6::double precision * coalesce(l.share, 0)
                          + 0.4::double precision * greatest(coalesce(c.cosine, $10), 0)
                END AS score_ceiling
            FROM candidates AS c
            LEFT JOIN lexical AS l ON l.id = c.id
        ),
        -- The max_count-th best score is at least the max_count-th best exact score among the
        -- few candidates with the highest score ceilings (the probe: 2 * max_count + 10; 0
        -- with fewer). A score above its own ceiling -- a cosine above the last of the nearest,
        -- which the HNSW index, being approximate, may have missed -- counts as the ceiling.
        probe AS (
            SELECT least(b.score_ceiling, %1$s * (
                    0.5
                    + 0.25 * prme._effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), $4))
                    + 0.25 * prme._effective_confidence(n.confidence_base, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), $4))
                )) AS score
            FROM (SELECT x.* FROM bounded AS x ORDER BY x.score_ceiling DESC, x.id LIMIT 2 * $7 + 10) AS b
            CROSS JOIN LATERAL (
                SELECT m.* FROM prme.nodes AS m WHERE m.user_id = $1 AND m.id = b.id OFFSET 0
            ) AS n
        ),
        -- So a candidate whose score ceiling is below that cannot be among the best: only the
        -- others have their cosine read and their row decayed, each by its primary key.
        finalists AS (
            SELECT b.id, %1$s AS relevance
            FROM bounded AS b
            WHERE b.score_ceiling >= coalesce(
                (SELECT p.score FROM probe AS p ORDER BY p.score DESC OFFSET $7 - 1 LIMIT 1), 0
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
                    n.created_at, n.updated_at, n.version, f.relevance::double precision AS relevance,
                    prme._effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), $4)
                    ) AS effective_salience,
                    prme._effective_confidence(n.confidence_base, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), $4)
                    ) AS effective_confidence
                FROM finalists AS f
                -- Each candidate by its primary key: a join would read all of the owner's rows.
                CROSS JOIN LATERAL (
                    SELECT m.* FROM prme.nodes AS m WHERE m.user_id = $1 AND m.id = f.id OFFSET 0
                ) AS n
                OFFSET 0  -- a level of its own: each effective value is computed once per row
            ) AS d
            ORDER BY score DESC, d.id
            LIMIT $7
        ) AS r
        ORDER BY r.score DESC, r.id
        $sql$,
        -- A bounded candidate's exact relevance: its cosine is read only when not known yet.
        CASE WHEN v_embedding IS NULL THEN 'b.lower_relevance' ELSE format(
            $sql$CASE WHEN b.cosine IS NOT NULL OR $10 <= 0 THEN b.lower_relevance
                ELSE 0.6::double precision * b.share + 0.4::double precision * greatest(coalesce((
                    SELECT -(v.embedding OPERATOR(%1$s.<#>) $6::%1$s.vector) FROM prme.node_embeddings AS v
                    WHERE v.user_id = $1 AND v.model_id = $5 AND v.node_id = b.id AND v.embedding IS NOT NULL
                ), 0), 0)
            END$sql$,
            v_vectors
        ) END
    ) USING v_user_id, v_lexemes, v_scopes, v_as_of, recall.embedding_model, v_embedding, recall.max_count,
        v_nearest_ids, v_nearest_cosines, v_cosine_ceiling,
        ARRAY(SELECT prme._any_lexeme_query(ARRAY[l.lexeme]) FROM unnest(v_lexemes) AS l (lexeme));
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
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (27, 'recall_thresholds', '2daefa925565d98b670e5a927a049b22ba04f7f6650f0227d7161687fdc7135c');

-- prme-pg migration 0029_find_nodes_by_meaning: the review search finds by meaning too (issue 31).
--
-- prme.find_nodes takes query_embedding real[] and embedding_model text (both optional, as
-- prme.recall takes them, validated the same way: PR422 for a vector that does not fit its
-- model). Given a vector and a server with pgvector, it returns the memories sharing a word
-- with the query and the max_count nearest by meaning (among the memories its filters keep,
-- in every lifecycle state); exact word matches still come first (most of the query's words
-- first), then the closest by meaning, then the newest change. Without a vector it is what
-- it was. The old signature is dropped; calls by name, as every client makes them, are
-- unchanged.
--
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0029_find_nodes_by_meaning.sql
-- (or prme-pg migrate). It replaces one function: catalog locks only, held for a moment.
-- Its body is copied from sql/postgres/315_find_nodes.sql.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/315_find_nodes.sql

DROP FUNCTION prme.find_nodes(text, text, text[], text[], text[], integer);

CREATE FUNCTION prme.find_nodes(
    user_id text,
    query text DEFAULT NULL,
    scopes text[] DEFAULT NULL,
    stabilities text[] DEFAULT NULL,
    lifecycle_states text[] DEFAULT NULL,
    max_count integer DEFAULT 50,
    query_embedding real[] DEFAULT NULL,
    embedding_model text DEFAULT NULL
)
RETURNS SETOF prme.node_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(find_nodes.user_id);
    v_scopes text[] := prme._valid_scopes(find_nodes.scopes);
    -- As recall: a model no memory has a vector of yet is not registered, so words.
    v_embedding real[] := CASE
        WHEN find_nodes.embedding_model IS NULL OR EXISTS (
            SELECT FROM prme.embedding_models AS m
            WHERE m.user_id = '*' AND m.model_id = find_nodes.embedding_model
        ) THEN prme._valid_embedding(find_nodes.embedding_model, find_nodes.query_embedding)
    END;
    v_vectors text := prme._vector_schema();
    v_lexemes text[];
    v_query tsquery;
BEGIN
    IF find_nodes.max_count IS NULL OR find_nodes.max_count NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 1000';
    END IF;
    IF octet_length(find_nodes.query) > 65536 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'query must be at most 65536 bytes',
            DETAIL = format('got %s bytes', octet_length(find_nodes.query));
    END IF;
    IF find_nodes.stabilities IS NOT NULL
        AND (
            cardinality(find_nodes.stabilities) NOT BETWEEN 1 AND 100
            OR array_ndims(find_nodes.stabilities) <> 1
            OR array_position(find_nodes.stabilities, NULL) IS NOT NULL
            OR NOT find_nodes.stabilities <@ ARRAY['low', 'semi-stable', 'stable']
        ) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'stabilities must be NULL or a list (of at most 100) of low, semi-stable and stable';
    END IF;
    IF find_nodes.lifecycle_states IS NOT NULL
        AND (
            cardinality(find_nodes.lifecycle_states) NOT BETWEEN 1 AND 100
            OR array_ndims(find_nodes.lifecycle_states) <> 1
            OR array_position(find_nodes.lifecycle_states, NULL) IS NOT NULL
            OR NOT find_nodes.lifecycle_states <@ ARRAY['active', 'contested', 'superseded', 'deprecated', 'archived']
        ) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'lifecycle_states must be NULL or a list (of at most 100) of active, contested, superseded, '
            'deprecated and archived';
    END IF;

    IF find_nodes.query IS NULL OR btrim(find_nodes.query, E' \t\n\r\f\v') = '' THEN
        RETURN QUERY
        SELECT (prme._node_view(n, FALSE)).*
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id
          AND (v_scopes IS NULL OR n.scope = ANY (v_scopes))
          AND (find_nodes.stabilities IS NULL OR n.stability = ANY (find_nodes.stabilities))
          AND (find_nodes.lifecycle_states IS NULL OR n.lifecycle_state = ANY (find_nodes.lifecycle_states))
        ORDER BY n.updated_at DESC, n.id
        LIMIT find_nodes.max_count;
        RETURN;
    END IF;

    v_lexemes := prme._query_lexemes(v_user_id, find_nodes.query);
    IF v_embedding IS NOT NULL AND v_vectors IS NOT NULL THEN
        -- Words and meaning. The nearest are found by a scan of the owner's vectors of the
        -- model (exact; the HNSW index's search is recall's), joined to their memories only
        -- when a filter must be tested. pgvector's operator is qualified with its schema.
        RETURN QUERY EXECUTE format(
            $sql$
            WITH
            matched AS MATERIALIZED (
                SELECT m.id, length(m.search) - length(ts_delete(m.search, $2)) AS shared FROM (
                    SELECT n.user_id, n.id, n.search
                    FROM prme.nodes AS n
                    WHERE n.search @@ prme._any_lexeme_query($2)
                      AND ($3 IS NULL OR n.scope = ANY ($3))
                      AND ($4 IS NULL OR n.stability = ANY ($4))
                      AND ($5 IS NULL OR n.lifecycle_state = ANY ($5))
                    OFFSET 0
                ) AS m
                WHERE m.user_id = $1
            ),
            nearest AS MATERIALIZED (
                SELECT v.node_id AS id, v.embedding OPERATOR(%1$s.<#>) $8::%1$s.vector AS distance
                FROM prme.node_embeddings AS v
                WHERE v.user_id = $1 AND v.model_id = $7 AND v.embedding IS NOT NULL
                  AND ($3 IS NULL AND $4 IS NULL AND $5 IS NULL OR EXISTS (
                      SELECT FROM prme.nodes AS n
                      WHERE n.user_id = $1 AND n.id = v.node_id
                        AND ($3 IS NULL OR n.scope = ANY ($3))
                        AND ($4 IS NULL OR n.stability = ANY ($4))
                        AND ($5 IS NULL OR n.lifecycle_state = ANY ($5))
                  ))
                ORDER BY distance, v.node_id
                LIMIT $6
            ),
            candidates AS (
                SELECT coalesce(m.id, s.id) AS id, coalesce(m.shared, 0) AS shared, s.distance
                FROM matched AS m FULL JOIN nearest AS s ON s.id = m.id
            ),
            -- Ranked by what decides the order; a word match not among the nearest has its
            -- vector read by primary key, and only the max_count best have their whole row read.
            best AS MATERIALIZED (
                SELECT c.id, c.shared, x.updated_at, coalesce(c.distance, (
                    SELECT v.embedding OPERATOR(%1$s.<#>) $8::%1$s.vector FROM prme.node_embeddings AS v
                    WHERE v.user_id = $1 AND v.model_id = $7 AND v.node_id = c.id AND v.embedding IS NOT NULL
                )) AS distance
                FROM candidates AS c
                CROSS JOIN LATERAL (
                    SELECT n.updated_at FROM prme.nodes AS n WHERE n.user_id = $1 AND n.id = c.id OFFSET 0
                ) AS x
                ORDER BY c.shared DESC, distance NULLS LAST, x.updated_at DESC, c.id
                LIMIT $6
            )
            SELECT (prme._node_view(x.node, FALSE)).*
            FROM best AS b
            CROSS JOIN LATERAL (
                SELECT n AS node FROM prme.nodes AS n WHERE n.user_id = $1 AND n.id = b.id OFFSET 0
            ) AS x
            ORDER BY b.shared DESC, b.distance NULLS LAST, b.updated_at DESC, b.id
            $sql$,
            v_vectors
        ) USING v_user_id, v_lexemes, v_scopes, find_nodes.stabilities, find_nodes.lifecycle_states,
            find_nodes.max_count, find_nodes.embedding_model, v_embedding;
        RETURN;
    END IF;
    IF cardinality(v_lexemes) = 0 THEN
        RETURN;  -- only stop words and punctuation, and no vector: nothing can match
    END IF;
    v_query := prme._any_lexeme_query(v_lexemes);
    -- As in recall: the GIN index finds this owner's matches; the owner test rechecks.
    -- Most of the query's words first, then the most recently changed.
    RETURN QUERY
    SELECT (prme._node_view(n, FALSE)).*
    FROM prme.nodes AS n
    WHERE n.search @@ v_query
      AND n.user_id = v_user_id
      AND (v_scopes IS NULL OR n.scope = ANY (v_scopes))
      AND (find_nodes.stabilities IS NULL OR n.stability = ANY (find_nodes.stabilities))
      AND (find_nodes.lifecycle_states IS NULL OR n.lifecycle_state = ANY (find_nodes.lifecycle_states))
    ORDER BY length(n.search) - length(ts_delete(n.search, v_lexemes)) DESC, n.updated_at DESC, n.id
    LIMIT find_nodes.max_count;
END;
$$;

COMMENT ON FUNCTION prme.find_nodes(text, text, text[], text[], text[], integer, real[], text) IS
'Memories of user_id in any lifecycle state for review: matching any word of query as recall matches (NULL or '
'blank: all) or, given query_embedding of model embedding_model and a server with pgvector, among the max_count '
'nearest by meaning; in the given scopes, stabilities and lifecycle states (NULL: any); most query words first, '
'then closest by meaning, then newest change first; max_count 1..1000; the query at most 64 KiB with 1024 '
'distinct lexemes, each list at most 100 entries; a vector that does not fit its model is refused (PR422). '
'Nothing is written. See docs/RECALL.md.';

REVOKE ALL ON FUNCTION prme.find_nodes(text, text, text[], text[], text[], integer, real[], text) FROM public;
GRANT EXECUTE ON FUNCTION prme.find_nodes(text, text, text[], text[], text[], integer, real[], text) TO prme_app;
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (29, 'find_nodes_by_meaning', 'c47d7e5978c6feb5848ff36ef571a4bdf76dfac24e6136d751265a487493dd12');

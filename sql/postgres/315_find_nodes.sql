-- =============================================================================
-- prme-pg: find_nodes (search and filter memories for review)
--
-- What a reviewer looks for: the owner's memories in any lifecycle state, found
-- by recall's word matching (owner-keyed lexemes, docs/RECALL.md) and filtered
-- by scope, stability and lifecycle state. Unlike recall it ranks by match and
-- recency, not by decayed strength: a faded or archived memory is still shown.
-- =============================================================================

CREATE FUNCTION prme.find_nodes(
    user_id text,
    query text DEFAULT NULL,
    scopes text[] DEFAULT NULL,
    stabilities text[] DEFAULT NULL,
    lifecycle_states text[] DEFAULT NULL,
    max_count integer DEFAULT 50
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
    IF cardinality(v_lexemes) = 0 THEN
        RETURN;  -- only stop words and punctuation: nothing can match
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

COMMENT ON FUNCTION prme.find_nodes(text, text, text[], text[], text[], integer) IS
'Memories of user_id in any lifecycle state for review: matching any word of query as recall matches (NULL or '
'blank: all), in the given scopes, stabilities and lifecycle states (NULL: any); most query words first, then '
'newest change first; max_count 1..1000; the query at most 64 KiB with 1024 distinct lexemes, each list at most '
'100 entries. Nothing is written.';

REVOKE ALL ON FUNCTION prme.find_nodes(text, text, text[], text[], text[], integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.find_nodes(text, text, text[], text[], text[], integer) TO prme_app;

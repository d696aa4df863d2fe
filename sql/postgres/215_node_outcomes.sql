-- =============================================================================
-- prme-pg: node_outcomes (one memory's outcome events)
--
-- The outcome events of one memory, newest first, for a reviewer; outcome_summary
-- counts them, this lists them.
-- =============================================================================

CREATE FUNCTION prme.node_outcomes(user_id text, node_id uuid, max_count integer DEFAULT 100)
RETURNS SETOF prme.outcome_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(node_outcomes.user_id);
BEGIN
    IF node_outcomes.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    IF node_outcomes.max_count IS NULL OR node_outcomes.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    PERFORM FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = node_outcomes.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
    -- Backwards along the index (user_id, node_id, created_at).
    RETURN QUERY
    SELECT (prme._outcome_view(o, FALSE)).*
    FROM prme.outcomes AS o
    WHERE o.user_id = v_user_id AND o.node_id = node_outcomes.node_id
    ORDER BY o.created_at DESC, o.id DESC
    LIMIT node_outcomes.max_count;
END;
$$;

COMMENT ON FUNCTION prme.node_outcomes(text, uuid, integer) IS
'The outcome events of one memory of user_id (any lifecycle state), newest first, at most max_count (1..10000). '
'PR404 for a missing or foreign memory.';

REVOKE ALL ON FUNCTION prme.node_outcomes(text, uuid, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.node_outcomes(text, uuid, integer) TO prme_app;

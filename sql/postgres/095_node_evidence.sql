-- =============================================================================
-- prme-pg: node_evidence (the evidence a memory cites)
--
-- The events named in a memory's evidence_refs, each once, for a reviewer.
-- =============================================================================

CREATE FUNCTION prme.node_evidence(user_id text, node_id uuid, max_count integer DEFAULT 100)
RETURNS SETOF prme.events
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(node_evidence.user_id);
    v_refs uuid[];
BEGIN
    IF node_evidence.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    IF node_evidence.max_count IS NULL OR node_evidence.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    SELECT n.evidence_refs INTO v_refs FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = node_evidence.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
    -- evidence_refs keeps repeats (one per confirmation); each event is listed once.
    RETURN QUERY
    SELECT e.*
    FROM prme.events AS e
    WHERE e.user_id = v_user_id AND e.id = ANY (v_refs)
    ORDER BY e.occurred_at, e.id
    LIMIT node_evidence.max_count;
END;
$$;

COMMENT ON FUNCTION prme.node_evidence(text, uuid, integer) IS
'The events a memory of user_id cites in evidence_refs, each once, oldest first, at most max_count (1..10000). '
'PR404 for a missing or foreign memory.';

REVOKE ALL ON FUNCTION prme.node_evidence(text, uuid, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.node_evidence(text, uuid, integer) TO prme_app;

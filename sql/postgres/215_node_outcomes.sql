-- =============================================================================
-- prme-pg: node_outcomes (one memory's outcome events)
--
-- The outcome events of one memory, newest first, for a reviewer; outcome_summary
-- counts them, this lists them: its outcome rows, and its confirmations, whose
-- explicit_reinforcement outcome is their journal record (the newest
-- nodes.reinforcements records of op reinforce; 110). A confirmation's outcome id is
-- the id of its outcome row (recorded_by 'reinforce', written by earlier releases)
-- when it has one, else its journal record's operation_id.
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
    v_reinforcements bigint;
BEGIN
    IF node_outcomes.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    IF node_outcomes.max_count IS NULL OR node_outcomes.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    SELECT n.reinforcements INTO v_reinforcements
    FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = node_outcomes.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
    RETURN QUERY
    SELECT u.*
    FROM (
        -- Backwards along the index (user_id, node_id, created_at).
        SELECT (prme._outcome_view(o, FALSE)).*
        FROM prme.outcomes AS o
        WHERE o.user_id = v_user_id AND o.node_id = node_outcomes.node_id AND o.recorded_by <> 'reinforce'
        UNION ALL
        -- Backwards along the journal's primary key.
        SELECT
            coalesce(x.id, c.operation_id), c.user_id, c.node_id, 'explicit_reinforcement'::text,
            prme._outcome_weight('explicit_reinforcement')::numeric(3, 2),
            c.evidence_id, NULL::text, NULL::text, NULL::text, c.request_id, 'reinforce'::text, c.node_version,
            c.recorded_at, FALSE
        FROM (
            SELECT j.user_id, j.node_id, j.node_version, j.operation_id, j.evidence_id, j.request_id, j.recorded_at
            FROM prme.journal AS j
            WHERE j.user_id = v_user_id AND j.node_id = node_outcomes.node_id AND j.op = 'reinforce'
            ORDER BY j.node_version DESC
            LIMIT least(v_reinforcements, node_outcomes.max_count)
        ) AS c
        LEFT JOIN prme.outcomes AS x
            ON x.user_id = c.user_id AND x.node_id = c.node_id AND x.recorded_by = 'reinforce'
            AND x.node_version = c.node_version
    ) AS u
    ORDER BY u.created_at DESC, u.id DESC
    LIMIT node_outcomes.max_count;
END;
$$;

COMMENT ON FUNCTION prme.node_outcomes(text, uuid, integer) IS
'The outcome events of one memory of user_id (any lifecycle state), newest first, at most max_count (1..10000). '
'PR404 for a missing or foreign memory.';

REVOKE ALL ON FUNCTION prme.node_outcomes(text, uuid, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.node_outcomes(text, uuid, integer) TO prme_app;

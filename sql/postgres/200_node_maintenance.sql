-- =============================================================================
-- prme-pg: maintenance bookkeeping (derived, on each memory's own row)
--
-- What maintenance needs per memory beyond its state lives on prme.nodes (040),
-- written by the statements that write the memory's row or its outcomes anyway:
--   * running totals of the outcome rows (210: record_outcome and correction
--     linking), added to by prme._add_outcome in the outcome's transaction.
--     Confirmations are not among them: a confirmation's outcome is its journal
--     record, counted by nodes.reinforcements in the confirmation's own UPDATE;
--   * the totals the memory's last review saw (settled in the review's UPDATE,
--     240 and 260): reviewed_explicit_reinforcements counts confirmations and
--     explicit_reinforcement outcome rows together. The report counts only newer
--     ones;
--   * the overdue cycles already decayed against its schedule (260).
-- So the maintenance report reads one row per memory and joins nothing
-- (docs/MAINTENANCE.md, "Scale"). The totals can be recomputed from prme.outcomes
-- (prme._rebuild_outcome_totals); review and decay bookkeeping cannot.
-- =============================================================================

-- What outcome counts since the last review call for, as one small code (the
-- recommendations after review_due, in their documented order; docs/MAINTENANCE.md §5):
--   0 nothing                                  4 review_memory, decrease_stability, mark_contested
--   1 review_memory (already low)              5 increase_stability
--   2 review_memory, decrease_stability        6 flag_for_review
--   3 review_memory, mark_contested (already low)
-- Only active and contested memories are considered; increases apply to active ones.
-- SQL-standard body, no SET clause: inlined into the statements that call it.
CREATE FUNCTION prme._maintenance_moves(
    stability text, lifecycle_state text, explicit_reinforcements bigint, implicit_successes bigint,
    explicit_corrections bigint
)
RETURNS smallint
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN CASE
    WHEN lifecycle_state NOT IN ('active', 'contested') THEN 0
    WHEN explicit_corrections >= 1
        THEN
            CASE WHEN stability = 'low' THEN 1 ELSE 2 END
            + CASE WHEN explicit_corrections >= 2 AND lifecycle_state = 'active' THEN 2 ELSE 0 END
    WHEN lifecycle_state <> 'active' THEN 0
    WHEN explicit_reinforcements >= 2 THEN CASE WHEN stability = 'stable' THEN 0 ELSE 5 END
    WHEN implicit_successes >= 5 AND stability = 'low' THEN 6
    ELSE 0
END::smallint;

COMMENT ON FUNCTION prme._maintenance_moves(text, text, bigint, bigint, bigint) IS
'Internal: what outcome counts since the last review call for, as a code (0 nothing, 1 review_memory, 2 and '
'decrease_stability, 3 review_memory and mark_contested, 4 all three, 5 increase_stability, 6 flag_for_review) '
'for a memory of this stability and lifecycle state (0 unless active or contested). See docs/MAINTENANCE.md.';

-- What the report makes of a code, beside _maintenance_moves that makes it: the
-- recommendations, in their documented order, of a memory that is due (with cycles
-- left to decay) or not, as constant arrays (nothing is built per row); and the
-- stability the code suggests (decreases one step down, increases one step up, a
-- flag at most to semi-stable). SQL-standard bodies: inlined into the report.
CREATE FUNCTION prme._maintenance_recommendations(moves smallint, due boolean, decays boolean)
RETURNS text[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN CASE
    WHEN NOT due
        THEN
            CASE moves
                WHEN 0 THEN '{}'::text[]
                WHEN 1 THEN '{review_memory}'
                WHEN 2 THEN '{review_memory,decrease_stability}'
                WHEN 3 THEN '{review_memory,mark_contested}'
                WHEN 4 THEN '{review_memory,decrease_stability,mark_contested}'
                WHEN 5 THEN '{increase_stability}'
                ELSE '{flag_for_review}'
            END
    WHEN decays
        THEN
            CASE moves
                WHEN 0 THEN '{decay_confidence,review_due}'::text[]
                WHEN 1 THEN '{decay_confidence,review_due,review_memory}'
                WHEN 2 THEN '{decay_confidence,review_due,review_memory,decrease_stability}'
                WHEN 3 THEN '{decay_confidence,review_due,review_memory,mark_contested}'
                WHEN 4 THEN '{decay_confidence,review_due,review_memory,decrease_stability,mark_contested}'
                WHEN 5 THEN '{decay_confidence,review_due,increase_stability}'
                ELSE '{decay_confidence,review_due,flag_for_review}'
            END
    ELSE CASE moves
        WHEN 0 THEN '{review_due}'::text[]
        WHEN 1 THEN '{review_due,review_memory}'
        WHEN 2 THEN '{review_due,review_memory,decrease_stability}'
        WHEN 3 THEN '{review_due,review_memory,mark_contested}'
        WHEN 4 THEN '{review_due,review_memory,decrease_stability,mark_contested}'
        WHEN 5 THEN '{review_due,increase_stability}'
        ELSE '{review_due,flag_for_review}'
    END
END;

COMMENT ON FUNCTION prme._maintenance_recommendations(smallint, boolean, boolean) IS
'Internal: the recommendations of a memory (decay_confidence, review_due, then what the code of '
'prme._maintenance_moves calls for) given that code, whether it is due, and whether it has cycles left to decay.';

CREATE FUNCTION prme._maintenance_suggested_stability(moves smallint, stability text)
RETURNS text
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN CASE moves
    WHEN 2 THEN CASE stability WHEN 'stable' THEN 'semi-stable' ELSE 'low' END
    WHEN 4 THEN CASE stability WHEN 'stable' THEN 'semi-stable' ELSE 'low' END
    WHEN 5 THEN CASE stability WHEN 'low' THEN 'semi-stable' ELSE 'stable' END
    WHEN 6 THEN 'semi-stable'
END;

COMMENT ON FUNCTION prme._maintenance_suggested_stability(smallint, text) IS
'Internal: the stability a code of prme._maintenance_moves suggests for a memory of this stability (NULL when '
'it suggests no change).';

CREATE FUNCTION prme._rebuild_outcome_totals(user_id text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(_rebuild_outcome_totals.user_id);
    v_rows bigint;
BEGIN
    -- One aggregate over the owner's outcome rows (not those recorded_by reinforce,
    -- which confirmations wrote in earlier releases: nodes.reinforcements counts
    -- them), written only to the memories whose totals differ.
    UPDATE prme.nodes AS n SET
        recorded_reinforcements = t.explicit_reinforcements,
        implicit_successes = t.implicit_successes,
        neutral_exposures = t.neutral_exposures,
        explicit_corrections = t.explicit_corrections,
        last_outcome_at = t.last_outcome_at
    FROM (
        SELECT
            m.id AS node_id,
            count(o.outcome) FILTER (WHERE o.outcome = 'explicit_reinforcement') AS explicit_reinforcements,
            count(o.outcome) FILTER (WHERE o.outcome = 'implicit_success') AS implicit_successes,
            count(o.outcome) FILTER (WHERE o.outcome = 'neutral_exposure') AS neutral_exposures,
            count(o.outcome) FILTER (WHERE o.outcome = 'explicit_correction') AS explicit_corrections,
            max(o.created_at) AS last_outcome_at
        FROM prme.nodes AS m
        LEFT JOIN prme.outcomes AS o
            ON o.user_id = m.user_id AND o.node_id = m.id AND o.recorded_by <> 'reinforce'
        WHERE m.user_id = v_user_id
        GROUP BY m.id
    ) AS t
    WHERE n.user_id = v_user_id AND n.id = t.node_id
      AND (n.recorded_reinforcements, n.implicit_successes, n.neutral_exposures, n.explicit_corrections,
           n.last_outcome_at)
          IS DISTINCT FROM
          (t.explicit_reinforcements, t.implicit_successes, t.neutral_exposures, t.explicit_corrections,
           t.last_outcome_at);
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END;
$$;

COMMENT ON FUNCTION prme._rebuild_outcome_totals(text) IS
'Internal: recomputes the running totals of outcome rows on one owner''s memories from prme.outcomes, set-based '
'(after a bulk load, or to repair), keeping review and decay bookkeeping. Returns the number of memories it '
'changed (0 when everything was right). Run it while the owner''s outcomes are not being recorded.';

-- =============================================================================
-- prme-pg: node_maintenance (derived bookkeeping per memory)
--
-- One row per memory, for what a memory's own row does not hold:
--   * a mirror of the memory's schedule fields (stability, lifecycle_state,
--     next_review_at, decay_profile) and review_due_at, written by triggers on
--     prme.nodes when one of them changes (add_node, archive_node, apply_patch,
--     mark_reviewed). A confirmation changes none of them and fires nothing;
--   * running totals of the outcomes recorded as rows (210: record_outcome and
--     correction linking), added to by each. Confirmations are not among them: a
--     confirmation's outcome is its journal record, counted on the node row
--     (prme.nodes.reinforcements) by the confirmation's own UPDATE;
--   * the totals the memory's last review saw (settled, 240), over both sources:
--     reviewed_explicit_reinforcements counts confirmations and recorded
--     explicit_reinforcement outcomes together. The report counts only newer ones;
--   * the overdue cycles already decayed against its schedule (260).
-- The maintenance report reads this table beside prme.nodes (docs/MAINTENANCE.md,
-- "Scale"). Everything here can be recomputed from prme.nodes and prme.outcomes
-- (prme._rebuild_node_maintenance) except the review and decay bookkeeping.
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

-- The memory's next_review_at if the maintenance report considers it (active or
-- contested), else null: the report's "due" test is one comparison.
CREATE FUNCTION prme._report_due_at(lifecycle_state text, next_review_at timestamptz)
RETURNS timestamptz
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN CASE WHEN lifecycle_state IN ('active', 'contested') THEN next_review_at END;

COMMENT ON FUNCTION prme._report_due_at(text, timestamptz) IS
'Internal: next_review_at of a memory the maintenance report considers (active or contested), else null.';

-- Columns in the order of migration 0008, less the three that 0014 dropped
-- (pending_moves, confidence_base, confidence_ten_thousandths: a confirmation
-- changes their inputs and no longer writes this row). Constraints are named (as
-- PostgreSQL would name them) so that a database upgraded by 0008, which builds
-- this table beside the old one, names them alike.
CREATE TABLE prme.node_maintenance (
    -- prme._report_due_at(lifecycle_state, next_review_at), set with them.
    review_due_at timestamptz,
    user_id text NOT NULL,
    node_id uuid NOT NULL,
    -- Mirror of prme.nodes (triggers nodes_maintenance_mirror_*).
    stability text NOT NULL,
    lifecycle_state text NOT NULL,
    next_review_at timestamptz,
    decay_profile text NOT NULL,
    -- Running totals of outcome rows (neutral exposures below: the report never reads
    -- them). Confirmations are counted by prme.nodes.reinforcements instead.
    explicit_reinforcements bigint NOT NULL DEFAULT 0
    CONSTRAINT node_maintenance_explicit_reinforcements_check CHECK (explicit_reinforcements >= 0),
    implicit_successes bigint NOT NULL DEFAULT 0
    CONSTRAINT node_maintenance_implicit_successes_check CHECK (implicit_successes >= 0),
    explicit_corrections bigint NOT NULL DEFAULT 0
    CONSTRAINT node_maintenance_explicit_corrections_check CHECK (explicit_corrections >= 0),
    last_outcome_at timestamptz,
    -- The totals the last review saw.
    -- Over confirmations and explicit_reinforcement outcome rows together, so it may
    -- exceed explicit_reinforcements.
    reviewed_explicit_reinforcements bigint NOT NULL DEFAULT 0
    CONSTRAINT node_maintenance_reviewed_explicit_reinforcements_check
    CHECK (reviewed_explicit_reinforcements >= 0),
    reviewed_implicit_successes bigint NOT NULL DEFAULT 0
    CONSTRAINT node_maintenance_reviewed_implicit_successes_check
    CHECK (reviewed_implicit_successes BETWEEN 0 AND implicit_successes),
    reviewed_explicit_corrections bigint NOT NULL DEFAULT 0
    CONSTRAINT node_maintenance_reviewed_explicit_corrections_check
    CHECK (reviewed_explicit_corrections BETWEEN 0 AND explicit_corrections),
    -- Overdue cycles already decayed against the next_review_at in decay_anchor.
    decay_anchor timestamptz,
    decay_cycles integer NOT NULL DEFAULT 0
    CONSTRAINT node_maintenance_decay_cycles_check CHECK (decay_cycles >= 0),
    -- Not read by the report.
    neutral_exposures bigint NOT NULL DEFAULT 0
    CONSTRAINT node_maintenance_neutral_exposures_check CHECK (neutral_exposures >= 0),
    reviewed_neutral_exposures bigint NOT NULL DEFAULT 0
    CONSTRAINT node_maintenance_reviewed_neutral_exposures_check
    CHECK (reviewed_neutral_exposures BETWEEN 0 AND neutral_exposures),
    reviewed_at timestamptz,
    updated_at timestamptz NOT NULL,
    CONSTRAINT node_maintenance_pkey PRIMARY KEY (user_id, node_id),
    CONSTRAINT node_maintenance_user_id_node_id_fkey
    FOREIGN KEY (user_id, node_id) REFERENCES prme.nodes (user_id, id)
);

COMMENT ON TABLE prme.node_maintenance IS
'Derived, one row per memory: a mirror of its schedule fields (kept by triggers on prme.nodes), the running totals '
'of its outcome rows (confirmations are counted by prme.nodes.reinforcements), the totals its last review settled '
'(over both), and the overdue cycles decayed against its schedule. See docs/MAINTENANCE.md.';

CREATE FUNCTION prme._mirror_node()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- A new memory has no outcomes yet. An existing one keeps its totals.
    INSERT INTO prme.node_maintenance AS k (
        user_id, node_id, stability, lifecycle_state, next_review_at, decay_profile, updated_at, review_due_at
    ) VALUES (
        NEW.user_id, NEW.id, NEW.stability, NEW.lifecycle_state, NEW.next_review_at, NEW.decay_profile,
        NEW.updated_at, prme._report_due_at(NEW.lifecycle_state, NEW.next_review_at)
    )
    ON CONFLICT (user_id, node_id) DO UPDATE SET
        stability = excluded.stability,
        lifecycle_state = excluded.lifecycle_state,
        next_review_at = excluded.next_review_at,
        decay_profile = excluded.decay_profile,
        updated_at = excluded.updated_at,
        review_due_at = excluded.review_due_at;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION prme._mirror_node() IS
'Internal trigger on prme.nodes: copies stability, lifecycle_state, next_review_at and decay_profile into the '
'memory''s prme.node_maintenance row (creating it for a new memory), with review_due_at.';

CREATE TRIGGER nodes_maintenance_mirror_insert
AFTER INSERT ON prme.nodes
FOR EACH ROW EXECUTE FUNCTION prme._mirror_node();

-- Only when a mirrored field really changes. A confirmation sets none of them, so
-- its UPDATE does not even queue this trigger.
CREATE TRIGGER nodes_maintenance_mirror_update
AFTER UPDATE OF stability, lifecycle_state, next_review_at, decay_profile ON prme.nodes
FOR EACH ROW
WHEN (
    (old.stability, old.lifecycle_state, old.next_review_at, old.decay_profile)
    IS DISTINCT FROM
    (new.stability, new.lifecycle_state, new.next_review_at, new.decay_profile)
)
EXECUTE FUNCTION prme._mirror_node();

-- Memories created before this module existed (an upgraded database).
INSERT INTO prme.node_maintenance (
    user_id, node_id, stability, lifecycle_state, next_review_at, decay_profile, updated_at, review_due_at
)
SELECT
    n.user_id,
    n.id,
    n.stability,
    n.lifecycle_state,
    n.next_review_at,
    n.decay_profile,
    now() AS updated_at,
    prme._report_due_at(n.lifecycle_state, n.next_review_at) AS review_due_at
FROM prme.nodes AS n
ON CONFLICT DO NOTHING;

CREATE FUNCTION prme._rebuild_node_maintenance(user_id text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(_rebuild_node_maintenance.user_id);
    v_rows bigint;
BEGIN
    -- Set-based: the mirror from prme.nodes and one aggregate over the owner's
    -- outcome rows (not the rows confirmations wrote before 0014: those are counted
    -- by prme.nodes.reinforcements), merged into the rows; review and decay
    -- bookkeeping is kept.
    WITH totals AS (
        SELECT
            o.node_id,
            count(*) FILTER (WHERE o.outcome = 'explicit_reinforcement') AS er,
            count(*) FILTER (WHERE o.outcome = 'implicit_success') AS isx,
            count(*) FILTER (WHERE o.outcome = 'neutral_exposure') AS ne,
            count(*) FILTER (WHERE o.outcome = 'explicit_correction') AS ec,
            max(o.created_at) AS last_at
        FROM prme.outcomes AS o
        WHERE o.user_id = v_user_id AND o.recorded_by <> 'reinforce'
        GROUP BY o.node_id
    )

    INSERT INTO prme.node_maintenance AS k (
        user_id, node_id, stability, lifecycle_state, next_review_at, decay_profile,
        explicit_reinforcements, implicit_successes, neutral_exposures, explicit_corrections, last_outcome_at,
        updated_at, review_due_at
    )
    SELECT
        n.user_id, n.id, n.stability, n.lifecycle_state, n.next_review_at, n.decay_profile,
        coalesce(t.er, 0), coalesce(t.isx, 0), coalesce(t.ne, 0), coalesce(t.ec, 0), t.last_at, now(),
        prme._report_due_at(n.lifecycle_state, n.next_review_at)
    FROM prme.nodes AS n
    LEFT JOIN totals AS t ON t.node_id = n.id
    WHERE n.user_id = v_user_id
    ON CONFLICT (user_id, node_id) DO UPDATE SET
        stability = excluded.stability,
        lifecycle_state = excluded.lifecycle_state,
        next_review_at = excluded.next_review_at,
        decay_profile = excluded.decay_profile,
        explicit_reinforcements = excluded.explicit_reinforcements,
        implicit_successes = excluded.implicit_successes,
        neutral_exposures = excluded.neutral_exposures,
        explicit_corrections = excluded.explicit_corrections,
        last_outcome_at = excluded.last_outcome_at,
        updated_at = excluded.updated_at,
        review_due_at = excluded.review_due_at
    WHERE (k.stability, k.lifecycle_state, k.next_review_at, k.decay_profile,
           k.explicit_reinforcements, k.implicit_successes, k.neutral_exposures, k.explicit_corrections,
           k.last_outcome_at, k.review_due_at)
          IS DISTINCT FROM
          (excluded.stability, excluded.lifecycle_state, excluded.next_review_at, excluded.decay_profile,
           excluded.explicit_reinforcements, excluded.implicit_successes,
           excluded.neutral_exposures, excluded.explicit_corrections, excluded.last_outcome_at,
           excluded.review_due_at);
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END;
$$;

COMMENT ON FUNCTION prme._rebuild_node_maintenance(text) IS
'Internal: recomputes the mirror and the running totals of outcome rows (review_due_at with them) of one '
'owner''s memories from prme.nodes and prme.outcomes, set-based (after a bulk load with triggers off, or to '
'repair), keeping review and decay bookkeeping. Returns the number of rows it wrote (0 when everything was '
'right). Run it while the owner''s memories are not being changed.';

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;
ALTER TABLE prme.node_maintenance ENABLE ROW LEVEL SECURITY;

-- Readers: prme_reader the rows of the owners bound to it, prme_auditor every row
-- (015_reader_bindings.sql).
GRANT SELECT ON prme.node_maintenance TO prme_reader, prme_auditor;
CREATE POLICY node_maintenance_reader_owner ON prme.node_maintenance FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY node_maintenance_auditor_all ON prme.node_maintenance FOR SELECT TO prme_auditor USING (TRUE);

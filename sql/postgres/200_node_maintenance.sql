-- =============================================================================
-- prme-pg: node_maintenance (derived bookkeeping per memory)
--
-- One row per memory, kept in the transaction of every change that matters to
-- maintenance, so the maintenance report reads this one narrow table and joins
-- nothing (docs/MAINTENANCE.md, "Scale"):
--   * a mirror of the memory's schedule fields (stability, lifecycle_state,
--     next_review_at, decay_profile, confidence_base), written by triggers on
--     prme.nodes whoever changes them (add_node, reinforce, archive_node, apply_patch,
--     mark_reviewed, other modules);
--   * running outcome totals, added to by every outcome (210);
--   * the totals the memory's last review saw (settled, 240): the report counts
--     only newer outcomes;
--   * the overdue cycles already decayed against its schedule (260);
--   * three values the report filters and decays on, set by the same statements
--     that change their inputs (migration 0008): what the outcomes since the last
--     review call for (pending_moves, prme._maintenance_moves), the schedule of a
--     memory the report considers (review_due_at, prme._report_due_at) and the
--     confidence in ten-thousandths. Plain columns, not generated ones: PostgreSQL
--     prepares a table's generation expressions again in every statement that
--     writes it, and every confirmation writes this row twice (docs/MAINTENANCE.md).
-- Everything here can be recomputed from prme.nodes and prme.outcomes
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

-- Columns in the order the report reads them (migration 0008): a scan takes a
-- row's columns apart from the first to the last one a statement needs, so the
-- report's first cut (pending_moves, review_due_at, user_id) costs three columns
-- per memory, what it computes from stops at decay_cycles, and the columns it
-- never reads come last. Constraints are named (as PostgreSQL would name them)
-- so that a database upgraded by 0008, which builds this table beside the old
-- one, names them alike.
CREATE TABLE prme.node_maintenance (
    -- What the outcomes since the last review call for, set with its inputs:
    -- prme._maintenance_moves(stability, lifecycle_state, totals - reviewed totals).
    pending_moves smallint NOT NULL,
    -- prme._report_due_at(lifecycle_state, next_review_at), set with them.
    review_due_at timestamptz,
    user_id text NOT NULL,
    node_id uuid NOT NULL,
    -- Mirror of prme.nodes (triggers nodes_maintenance_mirror_*).
    stability text NOT NULL,
    lifecycle_state text NOT NULL,
    next_review_at timestamptz,
    decay_profile text NOT NULL,
    confidence_base numeric(5, 4) NOT NULL,
    -- confidence_base * 10000, exact (numeric(5, 4)): the report decays in integers.
    confidence_ten_thousandths integer NOT NULL,
    -- Running outcome totals (neutral exposures below: the report never reads them).
    explicit_reinforcements bigint NOT NULL DEFAULT 0
    CONSTRAINT node_maintenance_explicit_reinforcements_check CHECK (explicit_reinforcements >= 0),
    implicit_successes bigint NOT NULL DEFAULT 0
    CONSTRAINT node_maintenance_implicit_successes_check CHECK (implicit_successes >= 0),
    explicit_corrections bigint NOT NULL DEFAULT 0
    CONSTRAINT node_maintenance_explicit_corrections_check CHECK (explicit_corrections >= 0),
    last_outcome_at timestamptz,
    -- The totals the last review saw.
    reviewed_explicit_reinforcements bigint NOT NULL DEFAULT 0
    CONSTRAINT node_maintenance_reviewed_explicit_reinforcements_check
    CHECK (reviewed_explicit_reinforcements BETWEEN 0 AND explicit_reinforcements),
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
'Derived, one row per memory: a mirror of its schedule fields (kept by triggers on prme.nodes), its running outcome '
'totals, the totals its last review settled, the overdue cycles decayed against its schedule, and what those '
'totals call for and its schedule as the report reads them (pending_moves, review_due_at, '
'confidence_ten_thousandths: set by every statement that changes their inputs). The maintenance report reads only '
'this table. See docs/MAINTENANCE.md.';

CREATE FUNCTION prme._mirror_node()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- A new memory has no outcomes yet: nothing pending. An existing one keeps its
    -- totals, and what they call for follows its (maybe new) stability and state.
    INSERT INTO prme.node_maintenance AS k (
        user_id, node_id, stability, lifecycle_state, next_review_at, decay_profile, confidence_base, updated_at,
        pending_moves, review_due_at, confidence_ten_thousandths
    ) VALUES (
        NEW.user_id, NEW.id, NEW.stability, NEW.lifecycle_state, NEW.next_review_at, NEW.decay_profile,
        NEW.confidence_base, NEW.updated_at,
        0, prme._report_due_at(NEW.lifecycle_state, NEW.next_review_at), (NEW.confidence_base * 10000)::integer
    )
    ON CONFLICT (user_id, node_id) DO UPDATE SET
        stability = excluded.stability,
        lifecycle_state = excluded.lifecycle_state,
        next_review_at = excluded.next_review_at,
        decay_profile = excluded.decay_profile,
        confidence_base = excluded.confidence_base,
        updated_at = excluded.updated_at,
        pending_moves = prme._maintenance_moves(
            excluded.stability, excluded.lifecycle_state,
            k.explicit_reinforcements - k.reviewed_explicit_reinforcements,
            k.implicit_successes - k.reviewed_implicit_successes,
            k.explicit_corrections - k.reviewed_explicit_corrections
        ),
        review_due_at = excluded.review_due_at,
        confidence_ten_thousandths = excluded.confidence_ten_thousandths;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION prme._mirror_node() IS
'Internal trigger on prme.nodes: copies stability, lifecycle_state, next_review_at, decay_profile and '
'confidence_base into the memory''s prme.node_maintenance row (creating it for a new memory), with what its '
'outcomes call for and its schedule and confidence as the report reads them.';

CREATE TRIGGER nodes_maintenance_mirror_insert
AFTER INSERT ON prme.nodes
FOR EACH ROW EXECUTE FUNCTION prme._mirror_node();

-- Only when a mirrored field really changes: reinforce at its caps, for example,
-- rewrites confidence_base with the same value and pays nothing here.
CREATE TRIGGER nodes_maintenance_mirror_update
AFTER UPDATE OF stability, lifecycle_state, next_review_at, decay_profile, confidence_base ON prme.nodes
FOR EACH ROW
WHEN (
    (old.stability, old.lifecycle_state, old.next_review_at, old.decay_profile, old.confidence_base)
    IS DISTINCT FROM
    (new.stability, new.lifecycle_state, new.next_review_at, new.decay_profile, new.confidence_base)
)
EXECUTE FUNCTION prme._mirror_node();

-- Memories created before this module existed (an upgraded database).
INSERT INTO prme.node_maintenance (
    user_id, node_id, stability, lifecycle_state, next_review_at, decay_profile, confidence_base, updated_at,
    pending_moves, review_due_at, confidence_ten_thousandths
)
SELECT
    n.user_id,
    n.id,
    n.stability,
    n.lifecycle_state,
    n.next_review_at,
    n.decay_profile,
    n.confidence_base,
    now() AS updated_at,
    0 AS pending_moves,
    prme._report_due_at(n.lifecycle_state, n.next_review_at) AS review_due_at,
    (n.confidence_base * 10000)::integer AS confidence_ten_thousandths
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
    -- outcomes, merged into the rows; review and decay bookkeeping is kept.
    WITH totals AS (
        SELECT
            o.node_id,
            count(*) FILTER (WHERE o.outcome = 'explicit_reinforcement') AS er,
            count(*) FILTER (WHERE o.outcome = 'implicit_success') AS isx,
            count(*) FILTER (WHERE o.outcome = 'neutral_exposure') AS ne,
            count(*) FILTER (WHERE o.outcome = 'explicit_correction') AS ec,
            max(o.created_at) AS last_at
        FROM prme.outcomes AS o
        WHERE o.user_id = v_user_id
        GROUP BY o.node_id
    )

    INSERT INTO prme.node_maintenance AS k (
        user_id, node_id, stability, lifecycle_state, next_review_at, decay_profile, confidence_base,
        explicit_reinforcements, implicit_successes, neutral_exposures, explicit_corrections, last_outcome_at,
        updated_at, pending_moves, review_due_at, confidence_ten_thousandths
    )
    SELECT
        n.user_id, n.id, n.stability, n.lifecycle_state, n.next_review_at, n.decay_profile, n.confidence_base,
        coalesce(t.er, 0), coalesce(t.isx, 0), coalesce(t.ne, 0), coalesce(t.ec, 0), t.last_at, now(),
        -- What is pending: the rebuilt totals minus what the last review settled
        -- (kept: an existing row's reviewed totals, none for a new row).
        prme._maintenance_moves(
            n.stability, n.lifecycle_state,
            coalesce(t.er, 0) - coalesce(r.reviewed_explicit_reinforcements, 0),
            coalesce(t.isx, 0) - coalesce(r.reviewed_implicit_successes, 0),
            coalesce(t.ec, 0) - coalesce(r.reviewed_explicit_corrections, 0)
        ),
        prme._report_due_at(n.lifecycle_state, n.next_review_at),
        (n.confidence_base * 10000)::integer
    FROM prme.nodes AS n
    LEFT JOIN totals AS t ON t.node_id = n.id
    LEFT JOIN prme.node_maintenance AS r ON r.user_id = n.user_id AND r.node_id = n.id
    WHERE n.user_id = v_user_id
    ON CONFLICT (user_id, node_id) DO UPDATE SET
        stability = excluded.stability,
        lifecycle_state = excluded.lifecycle_state,
        next_review_at = excluded.next_review_at,
        decay_profile = excluded.decay_profile,
        confidence_base = excluded.confidence_base,
        explicit_reinforcements = excluded.explicit_reinforcements,
        implicit_successes = excluded.implicit_successes,
        neutral_exposures = excluded.neutral_exposures,
        explicit_corrections = excluded.explicit_corrections,
        last_outcome_at = excluded.last_outcome_at,
        updated_at = excluded.updated_at,
        pending_moves = excluded.pending_moves,
        review_due_at = excluded.review_due_at,
        confidence_ten_thousandths = excluded.confidence_ten_thousandths
    WHERE (k.stability, k.lifecycle_state, k.next_review_at, k.decay_profile, k.confidence_base,
           k.explicit_reinforcements, k.implicit_successes, k.neutral_exposures, k.explicit_corrections,
           k.last_outcome_at, k.pending_moves, k.review_due_at, k.confidence_ten_thousandths)
          IS DISTINCT FROM
          (excluded.stability, excluded.lifecycle_state, excluded.next_review_at, excluded.decay_profile,
           excluded.confidence_base, excluded.explicit_reinforcements, excluded.implicit_successes,
           excluded.neutral_exposures, excluded.explicit_corrections, excluded.last_outcome_at,
           excluded.pending_moves, excluded.review_due_at, excluded.confidence_ten_thousandths);
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END;
$$;

COMMENT ON FUNCTION prme._rebuild_node_maintenance(text) IS
'Internal: recomputes the mirror, the running outcome totals and what they call for (pending_moves, '
'review_due_at, confidence_ten_thousandths) of one owner''s memories from prme.nodes and prme.outcomes, '
'set-based (after a bulk load with triggers off, or to repair), keeping review and decay bookkeeping. Returns '
'the number of rows it wrote (0 when everything was right). Run it while the owner''s memories are not being '
'changed.';

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;
ALTER TABLE prme.node_maintenance ENABLE ROW LEVEL SECURITY;

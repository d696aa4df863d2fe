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
--   * the overdue cycles already decayed against its schedule (260).
-- Everything here can be recomputed from prme.nodes and prme.outcomes
-- (prme._rebuild_node_maintenance) except the review and decay bookkeeping.
-- =============================================================================

CREATE TABLE prme.node_maintenance (
    user_id text NOT NULL,
    node_id uuid NOT NULL,
    -- Mirror of prme.nodes (triggers nodes_maintenance_mirror_*).
    stability text NOT NULL,
    lifecycle_state text NOT NULL,
    next_review_at timestamptz,
    decay_profile text NOT NULL,
    confidence_base numeric(5, 4) NOT NULL,
    -- Running outcome totals.
    explicit_reinforcements bigint NOT NULL DEFAULT 0 CHECK (explicit_reinforcements >= 0),
    implicit_successes bigint NOT NULL DEFAULT 0 CHECK (implicit_successes >= 0),
    neutral_exposures bigint NOT NULL DEFAULT 0 CHECK (neutral_exposures >= 0),
    explicit_corrections bigint NOT NULL DEFAULT 0 CHECK (explicit_corrections >= 0),
    last_outcome_at timestamptz,
    -- The totals the last review saw.
    reviewed_explicit_reinforcements bigint NOT NULL DEFAULT 0
    CHECK (reviewed_explicit_reinforcements BETWEEN 0 AND explicit_reinforcements),
    reviewed_implicit_successes bigint NOT NULL DEFAULT 0
    CHECK (reviewed_implicit_successes BETWEEN 0 AND implicit_successes),
    reviewed_neutral_exposures bigint NOT NULL DEFAULT 0
    CHECK (reviewed_neutral_exposures BETWEEN 0 AND neutral_exposures),
    reviewed_explicit_corrections bigint NOT NULL DEFAULT 0
    CHECK (reviewed_explicit_corrections BETWEEN 0 AND explicit_corrections),
    reviewed_at timestamptz,
    -- Overdue cycles already decayed against the next_review_at in decay_anchor.
    decay_anchor timestamptz,
    decay_cycles integer NOT NULL DEFAULT 0 CHECK (decay_cycles >= 0),
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, node_id),
    FOREIGN KEY (user_id, node_id) REFERENCES prme.nodes (user_id, id)
);

COMMENT ON TABLE prme.node_maintenance IS
'Derived, one row per memory: a mirror of its schedule fields (kept by triggers on prme.nodes), its running outcome '
'totals, the totals its last review settled, and the overdue cycles decayed against its schedule. The maintenance '
'report reads only this table. See docs/MAINTENANCE.md.';

CREATE FUNCTION prme._mirror_node()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO prme.node_maintenance AS k (
        user_id, node_id, stability, lifecycle_state, next_review_at, decay_profile, confidence_base, updated_at
    ) VALUES (
        NEW.user_id, NEW.id, NEW.stability, NEW.lifecycle_state, NEW.next_review_at, NEW.decay_profile,
        NEW.confidence_base, NEW.updated_at
    )
    ON CONFLICT (user_id, node_id) DO UPDATE SET
        stability = excluded.stability,
        lifecycle_state = excluded.lifecycle_state,
        next_review_at = excluded.next_review_at,
        decay_profile = excluded.decay_profile,
        confidence_base = excluded.confidence_base,
        updated_at = excluded.updated_at;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION prme._mirror_node() IS
'Internal trigger on prme.nodes: copies stability, lifecycle_state, next_review_at, decay_profile and '
'confidence_base into the memory''s prme.node_maintenance row (creating it for a new memory).';

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
    user_id, node_id, stability, lifecycle_state, next_review_at, decay_profile, confidence_base, updated_at
)
SELECT
    n.user_id,
    n.id,
    n.stability,
    n.lifecycle_state,
    n.next_review_at,
    n.decay_profile,
    n.confidence_base,
    now() AS updated_at
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
        updated_at
    )
    SELECT
        n.user_id, n.id, n.stability, n.lifecycle_state, n.next_review_at, n.decay_profile, n.confidence_base,
        coalesce(t.er, 0), coalesce(t.isx, 0), coalesce(t.ne, 0), coalesce(t.ec, 0), t.last_at, now()
    FROM prme.nodes AS n
    LEFT JOIN totals AS t ON t.node_id = n.id
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
        updated_at = excluded.updated_at
    WHERE (k.stability, k.lifecycle_state, k.next_review_at, k.decay_profile, k.confidence_base,
           k.explicit_reinforcements, k.implicit_successes, k.neutral_exposures, k.explicit_corrections,
           k.last_outcome_at)
          IS DISTINCT FROM
          (excluded.stability, excluded.lifecycle_state, excluded.next_review_at, excluded.decay_profile,
           excluded.confidence_base, excluded.explicit_reinforcements, excluded.implicit_successes,
           excluded.neutral_exposures, excluded.explicit_corrections, excluded.last_outcome_at);
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END;
$$;

COMMENT ON FUNCTION prme._rebuild_node_maintenance(text) IS
'Internal: recomputes the mirror and the running outcome totals of one owner''s memories from prme.nodes and '
'prme.outcomes, set-based (after a bulk load with triggers off, or to repair), keeping review and decay '
'bookkeeping. Returns the number of rows it wrote (0 when everything was right). Run it while the owner''s '
'memories are not being changed.';

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;
ALTER TABLE prme.node_maintenance ENABLE ROW LEVEL SECURITY;

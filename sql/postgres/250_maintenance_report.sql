-- =============================================================================
-- prme-pg: maintenance_report (recommendations; changes nothing)
--
-- One set-based query over prme.node_maintenance alone: the mirror of each
-- memory's schedule fields, its running outcome totals and what its last review
-- settled are all there, so the report joins nothing per memory and never
-- aggregates outcomes (docs/MAINTENANCE.md, "Scale"). The effective settings are
-- read once into variables. Outcomes are read only for memories with outcomes
-- after as_of, to leave those out. Counts are outcomes since the last review, up
-- to as_of:
--   explicit_correction >= 1          review_memory, and decrease_stability
--                                     (stable -> semi-stable, semi-stable -> low;
--                                     requires review) unless already low
--   explicit_correction >= 2          also mark_contested (when active)
--   explicit_reinforcement >= 2 and   increase_stability one step (low ->
--   no correction                     semi-stable -> stable; no review needed)
--   implicit_success >= 5, no         flag_for_review: low -> semi-stable at most,
--   correction, < 2 reinforcements    never stable (requires review)
--   neutral_exposure                  nothing
--   next_review_at <= as_of           review_due, and decay_confidence for the
--                                     overdue cycles not yet decayed
-- Only active and contested memories are considered; stability increases apply
-- to active memories only.
-- =============================================================================

CREATE FUNCTION prme.maintenance_report(user_id text, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (
    node_id uuid,
    recommendations text[],
    lifecycle_state text,
    stability text,
    suggested_stability text,
    confidence_base numeric,
    suggested_confidence numeric,
    next_review_at timestamptz,
    overdue_cycles integer,
    decayed_cycles integer,
    explicit_reinforcements bigint,
    implicit_successes bigint,
    explicit_corrections bigint
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Above jit_above_cost at a million memories, yet compiling the expressions costs
-- more than it saves (measured: seconds).
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(maintenance_report.user_id);
    v_as_of timestamptz := coalesce(prme._valid_timestamp('as_of', maintenance_report.as_of), now());
    -- The effective settings, read once: the query needs no join for them.
    v_low prme.maintenance_settings := prme._maintenance_setting(v_user_id, 'low');
    v_semi prme.maintenance_settings := prme._maintenance_setting(v_user_id, 'semi-stable');
    v_stable prme.maintenance_settings := prme._maintenance_setting(v_user_id, 'stable');
    v_low_seconds double precision := date_part('epoch', v_low.review_cadence);
    v_semi_seconds double precision := date_part('epoch', v_semi.review_cadence);
    v_stable_seconds double precision := date_part('epoch', v_stable.review_cadence);
    v_low_decay numeric := v_low.decay_per_cycle;
    v_semi_decay numeric := v_semi.decay_per_cycle;
    v_stable_decay numeric := v_stable.decay_per_cycle;
BEGIN
    RETURN QUERY
    WITH assessed AS (
        SELECT
            k.node_id,
            k.lifecycle_state,
            k.stability,
            k.confidence_base,
            k.decay_profile,
            k.next_review_at,
            -- Outcomes since the last review, up to as_of.
            greatest(k.explicit_reinforcements - k.reviewed_explicit_reinforcements - coalesce(l.later[1], 0), 0)
                AS er,
            greatest(k.implicit_successes - k.reviewed_implicit_successes - coalesce(l.later[2], 0), 0) AS isx,
            greatest(k.explicit_corrections - k.reviewed_explicit_corrections - coalesce(l.later[3], 0), 0) AS ec,
            -- Overdue cycles begun by as_of (computed for due memories only).
            CASE WHEN k.next_review_at <= v_as_of
                    THEN prme._cycles_due(k.next_review_at, v_as_of, CASE k.stability
                        WHEN 'low' THEN v_low_seconds WHEN 'semi-stable' THEN v_semi_seconds ELSE v_stable_seconds
                    END)
                ELSE 0
            END AS cycles_due,
            -- Cycles already decayed against the current schedule.
            CASE WHEN k.decay_anchor = k.next_review_at THEN k.decay_cycles ELSE 0 END AS cycles_done,
            CASE k.stability WHEN 'low' THEN v_low_decay WHEN 'semi-stable' THEN v_semi_decay ELSE v_stable_decay
            END AS decay_per_cycle
        FROM prme.node_maintenance AS k
        -- Outcomes recorded after as_of are not part of the report. Only memories
        -- whose newest outcome is later than as_of look them up (none when as_of is
        -- now): an index range scan each.
        CROSS JOIN LATERAL (
            SELECT CASE WHEN k.last_outcome_at > v_as_of THEN (
                SELECT ARRAY[
                    count(*) FILTER (WHERE o.outcome = 'explicit_reinforcement'),
                    count(*) FILTER (WHERE o.outcome = 'implicit_success'),
                    count(*) FILTER (WHERE o.outcome = 'explicit_correction')
                ]
                FROM prme.outcomes AS o
                WHERE o.user_id = k.user_id AND o.node_id = k.node_id AND o.created_at > v_as_of
            ) END AS later
        ) AS l
        WHERE k.user_id = v_user_id
          AND k.lifecycle_state IN ('active', 'contested')
          -- A cheap first cut (counted before leaving out later outcomes, which
          -- only lower them): neither due nor near any outcome threshold.
          AND (k.next_review_at <= v_as_of
               OR k.explicit_corrections > k.reviewed_explicit_corrections
               OR k.explicit_reinforcements >= k.reviewed_explicit_reinforcements + 2
               OR k.implicit_successes >= k.reviewed_implicit_successes + 5)
        -- A fence: the counts and cycles of each memory are computed once, not once
        -- per reference below.
        OFFSET 0
    )

    SELECT
        a.node_id,
        array_remove(ARRAY[
            CASE WHEN a.cycles_due > a.cycles_done AND a.confidence_base > 0 AND a.decay_per_cycle > 0
                    AND a.decay_profile <> 'permanent' THEN 'decay_confidence' END,
            CASE WHEN a.cycles_due > 0 THEN 'review_due' END,
            CASE WHEN a.ec >= 1 THEN 'review_memory' END,
            CASE WHEN a.ec >= 1 AND a.stability <> 'low' THEN 'decrease_stability' END,
            CASE WHEN a.ec = 0 AND a.er >= 2 AND a.stability <> 'stable' AND a.lifecycle_state = 'active'
                    THEN 'increase_stability' END,
            CASE WHEN a.ec = 0 AND a.er < 2 AND a.isx >= 5 AND a.stability = 'low' AND a.lifecycle_state = 'active'
                    THEN 'flag_for_review' END,
            CASE WHEN a.ec >= 2 AND a.lifecycle_state = 'active' THEN 'mark_contested' END
        ], NULL),
        a.lifecycle_state,
        a.stability,
        CASE
            WHEN a.ec >= 1 THEN CASE a.stability WHEN 'stable' THEN 'semi-stable' WHEN 'semi-stable' THEN 'low' END
            WHEN a.lifecycle_state <> 'active' THEN NULL
            WHEN a.er >= 2 THEN CASE a.stability WHEN 'low' THEN 'semi-stable' WHEN 'semi-stable' THEN 'stable' END
            WHEN a.isx >= 5 AND a.stability = 'low' THEN 'semi-stable'
        END,
        a.confidence_base::numeric,
        CASE WHEN a.cycles_due > a.cycles_done AND a.confidence_base > 0 AND a.decay_per_cycle > 0
                AND a.decay_profile <> 'permanent'
                THEN greatest(a.confidence_base - (a.cycles_due - a.cycles_done) * a.decay_per_cycle, 0)::numeric
        END,
        a.next_review_at,
        a.cycles_due,
        a.cycles_done,
        a.er,
        a.isx,
        a.ec
    FROM assessed AS a
    -- Exactly the memories with at least one recommendation.
    WHERE a.cycles_due > 0 OR a.ec >= 1
       OR (a.ec = 0 AND a.lifecycle_state = 'active'
           AND ((a.er >= 2 AND a.stability <> 'stable') OR (a.er < 2 AND a.isx >= 5 AND a.stability = 'low')));
END;
$$;

COMMENT ON FUNCTION prme.maintenance_report(text, timestamptz) IS
'Maintenance recommendations for the active and contested memories of user_id as of a time (default now): one row '
'per memory that needs any, with recommendations (in this order: decay_confidence, review_due, review_memory, '
'decrease_stability, increase_stability, flag_for_review, mark_contested), the suggested stability and confidence, '
'its schedule (overdue cycles begun, cycles already decayed) and the outcome counts since its last review. '
'Changes nothing; rows come in no particular order. See docs/MAINTENANCE.md.';

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;
GRANT EXECUTE ON FUNCTION prme.maintenance_report(text, timestamptz) TO prme_app;

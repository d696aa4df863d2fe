-- =============================================================================
-- prme-pg: maintenance_report (recommendations; changes nothing)
--
-- One set-based query over the owner's memories (prme.nodes: schedule,
-- confidence, confirmations counted by reinforcements, and the bookkeeping kept
-- on the same row: totals of outcome rows, what the last review settled, decay).
-- It joins nothing and never aggregates outcomes (docs/MAINTENANCE.md, "Scale"). The effective settings are read once into variables. Outcomes (rows,
-- and confirmations' journal records) are read only for memories with outcomes
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
-- The cost estimate counts the lookups of outcomes after as_of (almost never run)
-- for every memory, so it crosses jit_above_cost from about 5,000 memories on.
-- Compiling takes about 37 ms without LLVM's optimization and saves 8-13 % at a
-- million memories (it pays from about 300,000); with optimization and inlining,
-- the defaults there, the report is 25 % slower (docs/MAINTENANCE.md).
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
    -- Decay per cycle in ten-thousandths (numeric(5, 4): exact), like the memory's
    -- confidence_base * 10000: decay is integer arithmetic.
    v_low_decay integer := (v_low.decay_per_cycle * 10000)::integer;
    v_semi_decay integer := (v_semi.decay_per_cycle * 10000)::integer;
    v_stable_decay integer := (v_stable.decay_per_cycle * 10000)::integer;
BEGIN
    RETURN QUERY
    WITH counted AS (
        SELECT
            n.id AS node_id,
            n.lifecycle_state,
            n.stability,
            n.confidence_base,
            n.next_review_at,
            coalesce(n.next_review_at <= v_as_of, false) AS due,
            -- Outcomes since the last review, up to as_of: the totals (outcome rows and
            -- confirmations) minus what the review settled, minus (rarely) what was
            -- recorded after as_of.
            greatest(n.recorded_reinforcements + n.reinforcements - n.reviewed_explicit_reinforcements
                - coalesce(l.later[1], 0), 0) AS explicit_reinforcements,
            greatest(n.implicit_successes - n.reviewed_implicit_successes - coalesce(l.later[2], 0), 0)
                AS implicit_successes,
            greatest(n.explicit_corrections - n.reviewed_explicit_corrections - coalesce(l.later[3], 0), 0)
                AS explicit_corrections,
            n.decay_anchor,
            n.decay_cycles,
            n.decay_profile
        FROM prme.nodes AS n
        -- Outcomes recorded after as_of are not part of the report. Only memories
        -- whose newest outcome or confirmation is later than as_of look them up (none
        -- when as_of is now): an index range scan each. Of the confirmations after
        -- as_of, only the counted ones (the newest n.reinforcements) are left out.
        CROSS JOIN LATERAL (
            SELECT CASE WHEN n.last_outcome_at > v_as_of OR (n.reinforcements > 0 AND n.last_reinforced_at > v_as_of)
                THEN (
                    SELECT ARRAY[
                        count(*) FILTER (WHERE o.outcome = 'explicit_reinforcement') + least(n.reinforcements, (
                            SELECT count(*) FROM prme.journal AS j
                            WHERE j.user_id = n.user_id AND j.node_id = n.id AND j.op = 'reinforce'
                              AND j.recorded_at > v_as_of
                        )),
                        count(*) FILTER (WHERE o.outcome = 'implicit_success'),
                        count(*) FILTER (WHERE o.outcome = 'explicit_correction')
                    ]
                    FROM prme.outcomes AS o
                    WHERE o.user_id = n.user_id AND o.node_id = n.id AND o.created_at > v_as_of
                      AND o.recorded_by <> 'reinforce'
                ) END AS later
        ) AS l
        WHERE n.user_id = v_user_id AND n.lifecycle_state IN ('active', 'contested')
          -- The first cut, on the totals: outcomes after as_of only lower the counts,
          -- so a memory left out here would be left out below too.
          AND (n.next_review_at <= v_as_of
               OR n.explicit_corrections > n.reviewed_explicit_corrections
               OR n.recorded_reinforcements + n.reinforcements >= n.reviewed_explicit_reinforcements + 2
               OR n.implicit_successes >= n.reviewed_implicit_successes + 5)
        -- A fence: each value above is computed once per memory.
        OFFSET 0
    ),

    moved AS (
        SELECT
            c.*,
            -- What the counts call for, as a code (prme._maintenance_moves, inlined).
            prme._maintenance_moves(
                c.stability, c.lifecycle_state, c.explicit_reinforcements, c.implicit_successes,
                c.explicit_corrections
            ) AS moves,
            -- Overdue cycles begun by as_of (due memories only).
            CASE WHEN c.due
                    THEN prme._cycles_due(c.next_review_at, v_as_of, CASE c.stability
                        WHEN 'low' THEN v_low_seconds WHEN 'semi-stable' THEN v_semi_seconds ELSE v_stable_seconds
                    END)
                ELSE 0
            END AS cycles_due,
            -- Cycles already decayed against the current schedule.
            CASE WHEN c.decay_anchor = c.next_review_at THEN c.decay_cycles ELSE 0 END AS cycles_done,
            -- The decay per cycle (ten-thousandths); 0 for memories that do not decay
            -- (permanent, or confidence already 0).
            CASE WHEN c.confidence_base > 0 AND c.decay_profile <> 'permanent' THEN CASE c.stability
                WHEN 'low' THEN v_low_decay WHEN 'semi-stable' THEN v_semi_decay ELSE v_stable_decay END
            ELSE 0 END AS decay_per_cycle
        FROM counted AS c
        WHERE c.due OR c.explicit_reinforcements >= 2 OR c.implicit_successes >= 5 OR c.explicit_corrections >= 1
        OFFSET 0
    )

    SELECT
        c.node_id,
        -- decay_confidence: due, with overdue cycles not yet decayed.
        prme._maintenance_recommendations(c.moves, c.due, c.cycles_due > c.cycles_done AND c.decay_per_cycle > 0),
        c.lifecycle_state::text,
        c.stability::text,
        prme._maintenance_suggested_stability(c.moves, c.stability),
        c.confidence_base::numeric,
        CASE WHEN c.cycles_due > c.cycles_done AND c.decay_per_cycle > 0
            -- greatest(confidence_base - cycles * decay, 0) in ten-thousandths: the same
            -- value and scale (4), or 0 once nothing is left. In bigint: a memory due
            -- centuries before as_of has millions of hourly cycles.
            THEN CASE WHEN (c.confidence_base * 10000)::integer >= (c.cycles_due - c.cycles_done)::bigint * c.decay_per_cycle
                THEN ((c.confidence_base * 10000)::integer - (c.cycles_due - c.cycles_done)::bigint * c.decay_per_cycle)
                    * 0.0001
                ELSE 0
            END
        END,
        c.next_review_at,
        c.cycles_due,
        c.cycles_done,
        c.explicit_reinforcements,
        c.implicit_successes,
        c.explicit_corrections
    FROM moved AS c
    -- Exactly the memories with at least one recommendation.
    WHERE c.due OR c.moves > 0;
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

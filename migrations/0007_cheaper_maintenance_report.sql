-- prme-pg migration 0007_cheaper_maintenance_report: maintenance_report computes the same rows with
-- less work per memory: what does not depend on as_of is precomputed in prme.node_maintenance
-- (generated columns: what the outcomes since the last review call for, the schedule of a memory the
-- report considers, the confidence in ten-thousandths; existing rows are computed here), the report
-- filters on them, decays in integer arithmetic, chooses its
-- recommendations from constant arrays, and looks outcomes up only when some were recorded after
-- as_of. Same rules, same output (docs/MAINTENANCE.md).
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0007_cheaper_maintenance_report.sql
-- (or prme-pg migrate). Its body is the new function and columns of sql/postgres/200_node_maintenance.sql
-- and the changed function of sql/postgres/250_maintenance_report.sql.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/200_node_maintenance.sql: what the report needs and as_of does not change, precomputed

-- What the outcomes since the last review call for, as one small code (the
-- recommendations after review_due, in their documented order; docs/MAINTENANCE.md §5):
--   0 nothing                                  4 review_memory, decrease_stability, mark_contested
--   1 review_memory (already low)              5 increase_stability
--   2 review_memory, decrease_stability        6 flag_for_review
--   3 review_memory, mark_contested (already low)
-- Only active and contested memories are considered; increases apply to active ones.
-- SQL-standard body, no SET clause: bound to its objects when created, inlined into
-- the report's query; also the expression of node_maintenance.pending_moves.
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

REVOKE ALL ON FUNCTION prme._maintenance_moves(text, text, bigint, bigint, bigint) FROM public;

-- Generated columns: computed for every existing row here (the table is rewritten
-- once), and by PostgreSQL on every later write of the row, whoever writes it.
ALTER TABLE prme.node_maintenance
    ADD COLUMN pending_moves smallint NOT NULL GENERATED ALWAYS AS (
        prme._maintenance_moves(
            stability, lifecycle_state, explicit_reinforcements - reviewed_explicit_reinforcements,
            implicit_successes - reviewed_implicit_successes, explicit_corrections - reviewed_explicit_corrections
        )
    ) STORED,
    ADD COLUMN review_due_at timestamptz GENERATED ALWAYS AS (
        CASE WHEN lifecycle_state IN ('active', 'contested') THEN next_review_at END
    ) STORED,
    ADD COLUMN confidence_ten_thousandths integer NOT NULL GENERATED ALWAYS AS (
        (confidence_base * 10000)::integer
    ) STORED;

COMMENT ON TABLE prme.node_maintenance IS
'Derived, one row per memory: a mirror of its schedule fields (kept by triggers on prme.nodes), its running outcome '
'totals, the totals its last review settled, the overdue cycles decayed against its schedule, and (generated) what '
'those totals call for and the schedule of a memory the report considers. The maintenance report reads only this '
'table. See docs/MAINTENANCE.md.';

-- >>> sql/postgres/250_maintenance_report.sql: the same report, cheaper per memory

CREATE OR REPLACE FUNCTION prme.maintenance_report(user_id text, as_of timestamptz DEFAULT NULL)
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
    -- Decay per cycle in ten-thousandths (numeric(5, 4): exact), like the memory's
    -- confidence_ten_thousandths: decay is integer arithmetic.
    v_low_decay integer := (v_low.decay_per_cycle * 10000)::integer;
    v_semi_decay integer := (v_semi.decay_per_cycle * 10000)::integer;
    v_stable_decay integer := (v_stable.decay_per_cycle * 10000)::integer;
BEGIN
    RETURN QUERY
    WITH counted AS (
        SELECT
            k.node_id,
            k.lifecycle_state,
            k.stability,
            k.confidence_base,
            k.confidence_ten_thousandths,
            k.next_review_at,
            -- review_due_at is next_review_at (null unless active or contested).
            coalesce(k.review_due_at <= v_as_of, false) AS due,
            -- Outcomes since the last review, up to as_of: the totals minus what the
            -- review settled, minus (rarely) what was recorded after as_of.
            CASE WHEN k.last_outcome_at > v_as_of
                THEN greatest(k.explicit_reinforcements - k.reviewed_explicit_reinforcements - l.later[1], 0)
                ELSE k.explicit_reinforcements - k.reviewed_explicit_reinforcements
            END AS er,
            CASE WHEN k.last_outcome_at > v_as_of
                THEN greatest(k.implicit_successes - k.reviewed_implicit_successes - l.later[2], 0)
                ELSE k.implicit_successes - k.reviewed_implicit_successes
            END AS isx,
            CASE WHEN k.last_outcome_at > v_as_of
                THEN greatest(k.explicit_corrections - k.reviewed_explicit_corrections - l.later[3], 0)
                ELSE k.explicit_corrections - k.reviewed_explicit_corrections
            END AS ec,
            -- What they call for (a code, prme._maintenance_moves): precomputed in the
            -- row, unless outcomes were recorded after as_of.
            CASE WHEN k.last_outcome_at > v_as_of THEN prme._maintenance_moves(k.stability, k.lifecycle_state,
                    greatest(k.explicit_reinforcements - k.reviewed_explicit_reinforcements - l.later[1], 0),
                    greatest(k.implicit_successes - k.reviewed_implicit_successes - l.later[2], 0),
                    greatest(k.explicit_corrections - k.reviewed_explicit_corrections - l.later[3], 0))
                ELSE k.pending_moves
            END AS moves,
            -- Overdue cycles begun by as_of (due memories only).
            CASE WHEN k.review_due_at <= v_as_of
                    THEN prme._cycles_due(k.next_review_at, v_as_of, CASE k.stability
                        WHEN 'low' THEN v_low_seconds WHEN 'semi-stable' THEN v_semi_seconds ELSE v_stable_seconds
                    END)
                ELSE 0
            END AS cycles_due,
            -- Cycles already decayed against the current schedule.
            CASE WHEN k.decay_anchor = k.next_review_at THEN k.decay_cycles ELSE 0 END AS cycles_done,
            -- The decay per cycle (ten-thousandths); 0 for memories that do not decay
            -- (permanent, or confidence already 0).
            CASE WHEN k.decay_profile <> 'permanent' AND k.confidence_base > 0 THEN CASE k.stability
                WHEN 'low' THEN v_low_decay WHEN 'semi-stable' THEN v_semi_decay ELSE v_stable_decay END
            ELSE 0 END AS decay_per_cycle
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
        -- The first cut, on two precomputed columns: due, or outcomes that call for
        -- something. Outcomes after as_of only lower the counts, and lower counts
        -- never call for something when the totals call for nothing. Written before
        -- the owner test: about half of the rows fail it.
        WHERE (k.review_due_at <= v_as_of OR k.pending_moves > 0)
          AND k.user_id = v_user_id
        -- A fence: each value above is computed once per memory, not once per
        -- reference below.
        OFFSET 0
    )

    SELECT
        c.node_id,
        -- Constant arrays, chosen by the schedule and the code: nothing is built per row.
        CASE
            WHEN NOT c.due THEN CASE c.moves
                WHEN 1 THEN '{review_memory}'::text[]
                WHEN 2 THEN '{review_memory,decrease_stability}'
                WHEN 3 THEN '{review_memory,mark_contested}'
                WHEN 4 THEN '{review_memory,decrease_stability,mark_contested}'
                WHEN 5 THEN '{increase_stability}'
                ELSE '{flag_for_review}'
            END
            -- decay_confidence: due, with overdue cycles not yet decayed.
            WHEN c.cycles_due > c.cycles_done AND c.decay_per_cycle > 0 THEN CASE c.moves
                WHEN 0 THEN '{decay_confidence,review_due}'::text[]
                WHEN 1 THEN '{decay_confidence,review_due,review_memory}'
                WHEN 2 THEN '{decay_confidence,review_due,review_memory,decrease_stability}'
                WHEN 3 THEN '{decay_confidence,review_due,review_memory,mark_contested}'
                WHEN 4 THEN '{decay_confidence,review_due,review_memory,decrease_stability,mark_contested}'
                WHEN 5 THEN '{decay_confidence,review_due,increase_stability}'
                ELSE '{decay_confidence,review_due,flag_for_review}'
            END
            ELSE CASE c.moves
                WHEN 0 THEN '{review_due}'::text[]
                WHEN 1 THEN '{review_due,review_memory}'
                WHEN 2 THEN '{review_due,review_memory,decrease_stability}'
                WHEN 3 THEN '{review_due,review_memory,mark_contested}'
                WHEN 4 THEN '{review_due,review_memory,decrease_stability,mark_contested}'
                WHEN 5 THEN '{review_due,increase_stability}'
                ELSE '{review_due,flag_for_review}'
            END
        END,
        c.lifecycle_state,
        c.stability,
        -- Decreases go one step down, increases one step up, a flag at most to semi-stable.
        CASE c.moves
            WHEN 0 THEN NULL
            WHEN 5 THEN CASE c.stability WHEN 'low' THEN 'semi-stable' ELSE 'stable' END
            WHEN 6 THEN 'semi-stable'
            WHEN 2 THEN CASE c.stability WHEN 'stable' THEN 'semi-stable' ELSE 'low' END
            WHEN 4 THEN CASE c.stability WHEN 'stable' THEN 'semi-stable' ELSE 'low' END
        END,
        c.confidence_base::numeric,
        CASE WHEN c.cycles_due > c.cycles_done AND c.decay_per_cycle > 0
            -- greatest(confidence_base - cycles * decay, 0) in ten-thousandths: the same
            -- value and scale (4), or 0 once nothing is left.
            THEN CASE WHEN c.confidence_ten_thousandths >= (c.cycles_due - c.cycles_done) * c.decay_per_cycle
                THEN (c.confidence_ten_thousandths - (c.cycles_due - c.cycles_done) * c.decay_per_cycle) * 0.0001
                ELSE 0
            END
        END,
        c.next_review_at,
        c.cycles_due,
        c.cycles_done,
        c.er,
        c.isx,
        c.ec
    FROM counted AS c
    -- Exactly the memories with at least one recommendation.
    WHERE c.due OR c.moves > 0;
END;
$$;
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (7, 'cheaper_maintenance_report', 'ac81411cf3508583f087ce2161c5bb4857d8453bf922f86f2b780cf6179359fa');

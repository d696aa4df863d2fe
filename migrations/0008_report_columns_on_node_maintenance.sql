-- prme-pg migration 0008_report_columns_on_node_maintenance: three columns on prme.node_maintenance
-- that the maintenance report filters and decays on (pending_moves: what the outcomes since the last
-- review call for; review_due_at; confidence_ten_thousandths), set by the statements that already
-- write the row (the mirror trigger, _add_outcome, _settle_outcomes, the rebuild); the table's
-- columns in the order the report reads them; the report reading them. Same rules, same rows
-- (docs/MAINTENANCE.md, "Scale").
-- Copies prme.node_maintenance into its new layout: one write per memory, holding an exclusive
-- lock on it and a share lock on prme.nodes until commit (memory writes, outcomes and reviews
-- wait meanwhile; a transaction that wrote bookkeeping before a memory may deadlock with it
-- and be rolled back: apply it while writers are quiet).
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0008_report_columns_on_node_maintenance.sql
-- (or prme-pg migrate). Its bodies are those of sql/postgres/200, 210, 240 and 250.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/200_node_maintenance.sql: the rules of the new columns

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

-- >>> sql/postgres/200_node_maintenance.sql: the new layout, filled from the old one

-- The old table steps aside (its primary key index too: index names are per schema),
-- the new one takes its name, constraints and row-level security. Locks first, in the
-- order writers take them (a memory, then its bookkeeping row): the new table's
-- foreign key needs SHARE ROW EXCLUSIVE on prme.nodes, and taking it only then would
-- deadlock with a writer that changed a memory and has yet to write its bookkeeping.
LOCK TABLE prme.nodes IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE prme.node_maintenance IN ACCESS EXCLUSIVE MODE;
ALTER TABLE prme.node_maintenance RENAME TO node_maintenance_0007;
ALTER INDEX prme.node_maintenance_pkey RENAME TO node_maintenance_0007_pkey;

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

INSERT INTO prme.node_maintenance (
    pending_moves, review_due_at, user_id, node_id, stability, lifecycle_state, next_review_at, decay_profile,
    confidence_base, confidence_ten_thousandths, explicit_reinforcements, implicit_successes, explicit_corrections,
    last_outcome_at, reviewed_explicit_reinforcements, reviewed_implicit_successes, reviewed_explicit_corrections,
    decay_anchor, decay_cycles, neutral_exposures, reviewed_neutral_exposures, reviewed_at, updated_at
)
SELECT
    prme._maintenance_moves(
        k.stability, k.lifecycle_state,
        k.explicit_reinforcements - k.reviewed_explicit_reinforcements,
        k.implicit_successes - k.reviewed_implicit_successes,
        k.explicit_corrections - k.reviewed_explicit_corrections
    ),
    prme._report_due_at(k.lifecycle_state, k.next_review_at),
    k.user_id, k.node_id, k.stability, k.lifecycle_state, k.next_review_at, k.decay_profile, k.confidence_base,
    (k.confidence_base * 10000)::integer,
    k.explicit_reinforcements, k.implicit_successes, k.explicit_corrections, k.last_outcome_at,
    k.reviewed_explicit_reinforcements, k.reviewed_implicit_successes, k.reviewed_explicit_corrections,
    k.decay_anchor, k.decay_cycles, k.neutral_exposures, k.reviewed_neutral_exposures, k.reviewed_at, k.updated_at
FROM prme.node_maintenance_0007 AS k;

DROP TABLE prme.node_maintenance_0007;
ALTER TABLE prme.node_maintenance ENABLE ROW LEVEL SECURITY;

-- >>> sql/postgres/200_node_maintenance.sql: the writers set the new columns

CREATE OR REPLACE FUNCTION prme._mirror_node()
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

CREATE OR REPLACE FUNCTION prme._rebuild_node_maintenance(user_id text)
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

-- >>> sql/postgres/210_outcomes.sql: an outcome sets what its memory's totals call for

CREATE OR REPLACE FUNCTION prme._add_outcome(
    user_id text,
    node_id uuid,
    outcome text,
    evidence_id uuid,
    profile_id text,
    thread_id text,
    notes text,
    request_id uuid,
    recorded_by text,
    node_version bigint,
    created_at timestamptz
)
RETURNS prme.outcomes
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_row prme.outcomes;
    -- The outcome as increments of the totals pending_moves reads.
    v_er integer;
    v_is integer;
    v_ec integer;
BEGIN
    v_row.user_id := _add_outcome.user_id;
    v_row.id := gen_random_uuid();
    v_row.node_id := _add_outcome.node_id;
    v_row.outcome := _add_outcome.outcome;
    v_row.weight := prme._outcome_weight(_add_outcome.outcome);
    v_row.evidence_id := _add_outcome.evidence_id;
    v_row.profile_id := _add_outcome.profile_id;
    v_row.thread_id := _add_outcome.thread_id;
    v_row.notes := _add_outcome.notes;
    v_row.request_id := _add_outcome.request_id;
    v_row.recorded_by := _add_outcome.recorded_by;
    v_row.node_version := _add_outcome.node_version;
    v_row.created_at := _add_outcome.created_at;
    INSERT INTO prme.outcomes SELECT v_row.*;

    v_er := (v_row.outcome = 'explicit_reinforcement')::integer;
    v_is := (v_row.outcome = 'implicit_success')::integer;
    v_ec := (v_row.outcome = 'explicit_correction')::integer;
    UPDATE prme.node_maintenance AS k SET
        explicit_reinforcements = k.explicit_reinforcements + v_er,
        implicit_successes = k.implicit_successes + v_is,
        neutral_exposures = k.neutral_exposures + (v_row.outcome = 'neutral_exposure')::integer,
        explicit_corrections = k.explicit_corrections + v_ec,
        -- What the new totals call for (SET sees the old values: the increments again).
        pending_moves = prme._maintenance_moves(
            k.stability, k.lifecycle_state,
            k.explicit_reinforcements + v_er - k.reviewed_explicit_reinforcements,
            k.implicit_successes + v_is - k.reviewed_implicit_successes,
            k.explicit_corrections + v_ec - k.reviewed_explicit_corrections
        ),
        last_outcome_at = greatest(k.last_outcome_at, v_row.created_at),
        updated_at = v_row.created_at
    WHERE k.user_id = v_row.user_id AND k.node_id = v_row.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'prme.node_maintenance has no row for node %', v_row.node_id
            USING HINT = 'the nodes_maintenance_mirror trigger keeps one per node; rebuild with prme._rebuild_node_maintenance';
    END IF;
    RETURN v_row;
END;
$$;

COMMENT ON FUNCTION prme._add_outcome(text, uuid, text, uuid, text, text, text, uuid, text, bigint, timestamptz) IS
'Internal: appends one outcome event and adds it to the node''s running totals in prme.node_maintenance '
'(and what they call for, pending_moves). '
'The caller has validated the arguments and holds a lock on the node.';

-- >>> sql/postgres/240_reviews_and_decay.sql: a review sets what is left pending

CREATE OR REPLACE FUNCTION prme._settle_outcomes(
    user_id text,
    node_id uuid,
    explicit_reinforcements bigint,
    implicit_successes bigint,
    neutral_exposures bigint,
    explicit_corrections bigint,
    reviewed_at timestamptz
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- Counts only grow (outcomes are append-only), so greatest() makes settling
    -- idempotent and order-independent.
    UPDATE prme.node_maintenance AS k SET
        reviewed_explicit_reinforcements
        = greatest(k.reviewed_explicit_reinforcements, _settle_outcomes.explicit_reinforcements),
        reviewed_implicit_successes = greatest(k.reviewed_implicit_successes, _settle_outcomes.implicit_successes),
        reviewed_neutral_exposures = greatest(k.reviewed_neutral_exposures, _settle_outcomes.neutral_exposures),
        reviewed_explicit_corrections
        = greatest(k.reviewed_explicit_corrections, _settle_outcomes.explicit_corrections),
        reviewed_at = _settle_outcomes.reviewed_at,
        updated_at = _settle_outcomes.reviewed_at,
        -- What is left pending after the settled counts (SET sees the old values).
        pending_moves = prme._maintenance_moves(
            k.stability, k.lifecycle_state,
            k.explicit_reinforcements
            - greatest(k.reviewed_explicit_reinforcements, _settle_outcomes.explicit_reinforcements),
            k.implicit_successes - greatest(k.reviewed_implicit_successes, _settle_outcomes.implicit_successes),
            k.explicit_corrections
            - greatest(k.reviewed_explicit_corrections, _settle_outcomes.explicit_corrections)
        )
    WHERE k.user_id = _settle_outcomes.user_id AND k.node_id = _settle_outcomes.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'prme.node_maintenance has no row for node %', _settle_outcomes.node_id
            USING HINT = 'the nodes_maintenance_mirror trigger keeps one per node; rebuild with prme._rebuild_node_maintenance';
    END IF;
END;
$$;

-- >>> sql/postgres/250_maintenance_report.sql: the report filters and decays on the columns

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
            CASE WHEN k.confidence_ten_thousandths > 0 AND k.decay_profile <> 'permanent' THEN CASE k.stability
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
            -- value and scale (4), or 0 once nothing is left. In bigint: a memory due
            -- centuries before as_of has millions of hourly cycles.
            THEN CASE WHEN c.confidence_ten_thousandths >= (c.cycles_due - c.cycles_done)::bigint * c.decay_per_cycle
                THEN (c.confidence_ten_thousandths - (c.cycles_due - c.cycles_done)::bigint * c.decay_per_cycle)
                    * 0.0001
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

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (8, 'report_columns_on_node_maintenance', '3c269d360d1271505fa63fba134fe21947d0d80dff51e09721871070a314c96d');

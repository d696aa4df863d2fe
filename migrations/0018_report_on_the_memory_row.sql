-- prme-pg migration 0018_report_on_the_memory_row: the maintenance bookkeeping moves onto the
-- memory's own row, so that maintenance_report reads one row per memory and joins nothing
-- (docs/MAINTENANCE.md, "Scale"). Since 0014_hot_path a confirmation writes only its node row and
-- its journal record, so the report had to join prme.nodes (confidence, confirmations) with
-- prme.node_maintenance (outcome totals, review and decay bookkeeping): about 10x one scan of the
-- outcome table instead of at most 3x.
--   * prme.nodes gains the running totals of outcome rows (recorded_reinforcements,
--     implicit_successes, neutral_exposures, explicit_corrections, last_outcome_at), the totals
--     the last review settled (reviewed_*, reviewed_at) and the decay bookkeeping (decay_anchor,
--     decay_cycles), copied from prme.node_maintenance, which is dropped with its mirror triggers.
--     None of the new columns is indexed (every UPDATE that writes them stays HOT) or has a CHECK
--     constraint (each would be read back and evaluated in every confirmation's UPDATE).
--   * _add_outcome adds to the totals on the memory's row; mark_reviewed and applied stability and
--     lifecycle ops settle in the UPDATE of the memory they make anyway, decay records its cycles
--     there too (_settle_outcomes is gone); outcome_summary, maintenance_patch and the report read
--     the memory's row. _rebuild_node_maintenance becomes _rebuild_outcome_totals (totals only).
--   * _node_state, _node_view and _journal_entry take prme.nodes as an argument (SQL-standard
--     bodies depend on its row type), so they are dropped and created again, unchanged.
--   * Each rule written once: the outcome weights are prme._outcome_weight (now an inlined
--     SQL-standard body), which the outcomes' CHECK, the scores and node_outcomes use; what the
--     report makes of a code of _maintenance_moves is _maintenance_recommendations and
--     _maintenance_suggested_stability, beside it.
--   * _key_replays is renamed _is_replay (what it answers) and reads both places a key can live
--     in one statement; reinforce reads the node's namespace and takes the key's advisory lock
--     in one statement.
-- Same rules, same rows: maintenance_report, outcome_summary, node_outcomes and the replays and
-- conflicts of keys are the same before and after (tests/test_migrations.py).
-- Locks: ACCESS EXCLUSIVE on prme.nodes, prme.node_maintenance and prme.outcomes until commit
-- (ALTER TABLE, DROP TABLE): every memory and outcome call waits meanwhile. It writes each memory
-- that has outcome rows, a review or decay bookkeeping once (a HOT update: no index changes) and
-- reads every outcome row once (the new CHECK is validated).
-- Time, measured here (2 cores shared with other work, load average about 6, PostgreSQL 15,
-- durability on): 13.1 s for 200,000 memories with 1,000,000 outcome rows, each memory with
-- bookkeeping: about 65 s per million memories (with five million outcome rows).
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0018_report_on_the_memory_row.sql
-- (or prme-pg migrate).

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/040_nodes.sql: the bookkeeping columns

DROP FUNCTION prme._journal_entry(text, text, uuid, uuid, uuid, prme.nodes, prme.nodes);
DROP FUNCTION prme._node_view(prme.nodes, boolean);
DROP FUNCTION prme._node_state(prme.nodes);

ALTER TABLE prme.nodes
ADD COLUMN recorded_reinforcements bigint NOT NULL DEFAULT 0,
ADD COLUMN implicit_successes bigint NOT NULL DEFAULT 0,
ADD COLUMN neutral_exposures bigint NOT NULL DEFAULT 0,
ADD COLUMN explicit_corrections bigint NOT NULL DEFAULT 0,
ADD COLUMN last_outcome_at timestamptz,
ADD COLUMN reviewed_explicit_reinforcements bigint NOT NULL DEFAULT 0,
ADD COLUMN reviewed_implicit_successes bigint NOT NULL DEFAULT 0,
ADD COLUMN reviewed_neutral_exposures bigint NOT NULL DEFAULT 0,
ADD COLUMN reviewed_explicit_corrections bigint NOT NULL DEFAULT 0,
ADD COLUMN reviewed_at timestamptz,
ADD COLUMN decay_anchor timestamptz,
ADD COLUMN decay_cycles integer NOT NULL DEFAULT 0;

COMMENT ON COLUMN prme.nodes.recorded_reinforcements IS
'Derived: explicit_reinforcement outcome rows of the memory in prme.outcomes (record_outcome; confirmations are '
'counted by reinforcements). This and the other outcome and review columns are maintenance bookkeeping, not part '
'of journal states (docs/MAINTENANCE.md).';
COMMENT ON COLUMN prme.nodes.reviewed_explicit_reinforcements IS
'Derived: the explicit reinforcements (confirmations and outcome rows together) the memory''s last review saw.';
COMMENT ON COLUMN prme.nodes.decay_cycles IS
'Derived: overdue review cycles already decayed against the next_review_at in decay_anchor.';

-- Every memory whose bookkeeping row holds anything but the defaults, once.
UPDATE prme.nodes AS n SET
    recorded_reinforcements = k.explicit_reinforcements,
    implicit_successes = k.implicit_successes,
    neutral_exposures = k.neutral_exposures,
    explicit_corrections = k.explicit_corrections,
    last_outcome_at = k.last_outcome_at,
    reviewed_explicit_reinforcements = k.reviewed_explicit_reinforcements,
    reviewed_implicit_successes = k.reviewed_implicit_successes,
    reviewed_neutral_exposures = k.reviewed_neutral_exposures,
    reviewed_explicit_corrections = k.reviewed_explicit_corrections,
    reviewed_at = k.reviewed_at,
    decay_anchor = k.decay_anchor,
    decay_cycles = k.decay_cycles
FROM prme.node_maintenance AS k
WHERE n.user_id = k.user_id AND n.id = k.node_id
  AND (
      (k.explicit_reinforcements, k.implicit_successes, k.neutral_exposures, k.explicit_corrections,
       k.reviewed_explicit_reinforcements, k.reviewed_implicit_successes, k.reviewed_neutral_exposures,
       k.reviewed_explicit_corrections, k.decay_cycles) <> (0, 0, 0, 0, 0, 0, 0, 0, 0)
      OR k.last_outcome_at IS NOT NULL OR k.reviewed_at IS NOT NULL OR k.decay_anchor IS NOT NULL
  );

-- >>> sql/postgres/200_node_maintenance.sql: no table of its own

DROP TRIGGER nodes_maintenance_mirror_insert ON prme.nodes;
DROP TRIGGER nodes_maintenance_mirror_update ON prme.nodes;
DROP FUNCTION prme._mirror_node();
DROP FUNCTION prme._rebuild_node_maintenance(text);
DROP FUNCTION prme._settle_outcomes(text, uuid, bigint, bigint, bigint, bigint, timestamptz);
DROP TABLE prme.node_maintenance;
DROP FUNCTION prme._report_due_at(text, timestamptz);

-- >>> sql/postgres/040_nodes.sql

CREATE FUNCTION prme._node_state(node prme.nodes)
RETURNS text
LANGUAGE sql
STABLE
PARALLEL SAFE
-- RFC 8785 text built directly: keys in sorted order, no whitespace. to_json()
-- escapes strings exactly as RFC 8785 does; trim_scale() gives the shortest
-- decimal form of a numeric(5,4) (0.6500 -> 0.65, 1.0000 -> 1).
RETURN '{"confidence_base":' || trim_scale(node.confidence_base)::text
|| ',"content":' || to_json(node.content)::text
|| ',"created_at":' || prme._json_time(node.created_at)
|| ',"decay_profile":' || to_json(node.decay_profile)::text
|| ',"evidence_refs":' || array_to_json(node.evidence_refs)::text
|| ',"id":"' || node.id::text
|| '","kind":' || to_json(node.kind)::text
|| ',"last_reinforced_at":' || prme._json_time(node.last_reinforced_at)
|| ',"lifecycle_state":' || to_json(node.lifecycle_state)::text
|| ',"namespace":' || to_json(node.namespace)::text
|| ',"next_review_at":' || prme._json_time(node.next_review_at)
|| ',"reinforcement_boost":' || trim_scale(node.reinforcement_boost)::text
|| ',"salience_base":' || trim_scale(node.salience_base)::text
|| ',"scope":' || to_json(node.scope)::text
|| ',"stability":' || to_json(node.stability)::text
|| ',"updated_at":' || prme._json_time(node.updated_at)
|| ',"user_id":' || to_json(node.user_id)::text
|| ',"version":' || node.version::text
|| '}';

COMMENT ON FUNCTION prme._node_state(prme.nodes) IS
'Internal: the complete state of a node as RFC 8785 canonical JSON, as journal records embed it '
'(every column but derived ones).';

CREATE FUNCTION prme._node_view(node prme.nodes, replayed boolean)
RETURNS prme.node_view
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN ROW(
        node.id, node.user_id, node.namespace, node.scope, node.kind, node.content,
        node.confidence_base, node.salience_base, node.reinforcement_boost, node.last_reinforced_at,
        node.evidence_refs, node.stability, node.next_review_at, node.lifecycle_state,
        node.decay_profile, node.created_at, node.updated_at, node.version, replayed
    )::prme.node_view;
END;
$$;

COMMENT ON FUNCTION prme._node_view(prme.nodes, boolean) IS
'Internal: the API view of a node row (drops derived columns, adds replayed).';

-- >>> sql/postgres/060_journal.sql

CREATE FUNCTION prme._journal_entry(
    op text,
    policy text,
    operation_id uuid,
    request_id uuid,
    evidence_id uuid,
    before prme.nodes,
    after prme.nodes
)
RETURNS prme.journal
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_entry prme.journal;
BEGIN
    v_entry.user_id := after.user_id;
    v_entry.node_id := after.id;
    v_entry.node_version := after.version;
    v_entry.record_version := 2;
    v_entry.op := op;
    v_entry.operation_id := operation_id;
    v_entry.request_id := request_id;
    v_entry.evidence_id := evidence_id;
    v_entry.prev_checksum := before.last_checksum;
    v_entry.recorded_at := after.updated_at;
    v_entry.key_namespace := CASE WHEN request_id IS NOT NULL THEN after.namespace END;
    v_entry.record := prme._journal_record_v2(
        op, policy, operation_id, request_id, after.user_id, after.id, evidence_id,
        CASE WHEN before.id IS NULL THEN NULL ELSE prme._node_state(before) END,
        prme._node_state(after),
        before.last_checksum,
        after.updated_at
    );
    v_entry.checksum := prme._sha256_hex(v_entry.record);
    RETURN v_entry;
END;
$$;

COMMENT ON FUNCTION prme._journal_entry(text, text, uuid, uuid, uuid, prme.nodes, prme.nodes) IS
'Internal: the journal row for a mutation from before (NULL on create) to after; the caller inserts it '
'and stores its checksum in nodes.last_checksum.';

-- >>> sql/postgres/110_reinforce.sql

CREATE FUNCTION prme._is_replay(
    user_id text,
    namespace text,
    request_id uuid,
    operation text,
    node_id uuid,
    evidence_id uuid
)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_key record;
BEGIN
    -- Where the key lives, in one read: a confirmation's key is its journal record
    -- (index journal_request_key), record_outcome's a prme.request_keys row. A key is
    -- in one place only (both kinds of call claim it under its advisory lock).
    SELECT u.operation, u.node_id, u.evidence_id INTO v_key
    FROM (
        SELECT j.op AS operation, j.node_id, j.evidence_id
        FROM prme.journal AS j
        WHERE j.user_id = _is_replay.user_id
          AND j.key_namespace = _is_replay.namespace
          AND j.request_id = _is_replay.request_id
        UNION ALL
        SELECT k.operation, k.node_id, k.evidence_id
        FROM prme.request_keys AS k
        WHERE k.user_id = _is_replay.user_id
          AND k.namespace = _is_replay.namespace
          AND k.request_id = _is_replay.request_id
    ) AS u
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN FALSE;
    END IF;
    IF v_key.operation = _is_replay.operation AND v_key.node_id = _is_replay.node_id
       AND v_key.evidence_id IS NOT DISTINCT FROM _is_replay.evidence_id THEN
        RETURN TRUE;
    END IF;
    RAISE EXCEPTION USING
        ERRCODE = 'PR409',
        MESSAGE = 'request_id was already used for another request',
        DETAIL = 'an idempotency key is bound to one operation, node and evidence';
END;
$$;

COMMENT ON FUNCTION prme._is_replay(text, text, uuid, text, uuid, uuid) IS
'Internal (volatile on purpose: each call reads with a fresh snapshot, so it sees keys committed while the '
'caller waited for the key''s advisory lock): true when a committed key binds request_id to this same operation, '
'node and evidence (the call is a replay); false when the key is unused; PR409 when it is bound to anything else. '
'A key is a journal record carrying request_id (reinforce) or a prme.request_keys row (record_outcome).';

CREATE OR REPLACE FUNCTION prme.reinforce(
    node_id uuid,
    user_id text,
    evidence_id uuid DEFAULT NULL,
    request_id uuid DEFAULT NULL
)
RETURNS prme.node_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(reinforce.user_id);
    v_node prme.nodes;
    v_after prme.nodes;
    v_entry prme.journal;
    v_key record;
    v_now timestamptz := now();
BEGIN
    IF reinforce.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;

    -- 2. Replay check before any row lock: plain reads, no WAL. The key's advisory
    -- lock (prme._key_lock: memory only, no WAL either) comes first, and every call
    -- that claims a key holds it until it commits, so the key seen here stays the key
    -- until this call commits: no re-check is needed once the row is locked.
    IF reinforce.request_id IS NOT NULL THEN
        -- The key is the node's namespace's: read it and take the key's lock in one
        -- statement (no row lock yet).
        SELECT n.namespace, pg_advisory_xact_lock(prme._key_lock(v_user_id, n.namespace, reinforce.request_id))
        INTO v_key
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id AND n.id = reinforce.node_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
        END IF;
        v_node.namespace := v_key.namespace;
        IF prme._is_replay(
            v_user_id, v_node.namespace, reinforce.request_id, 'reinforce', reinforce.node_id, reinforce.evidence_id
        ) THEN
            -- Read the node now: a replay returns the current node, and this new
            -- snapshot sees the update of the call that committed the key.
            SELECT n.* INTO v_node
            FROM prme.nodes AS n
            WHERE n.user_id = v_user_id AND n.id = reinforce.node_id;
            RETURN prme._node_view(v_node, TRUE);
        END IF;
    END IF;

    -- 3. Lock the node; missing, foreign and archived nodes are all "not found".
    SELECT n.* INTO v_node
    FROM prme.nodes AS n
    WHERE n.user_id = v_user_id AND n.id = reinforce.node_id
    FOR UPDATE;
    IF NOT FOUND OR v_node.lifecycle_state = 'archived' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;

    -- 4. Evidence must be an event of the same owner and scope.
    IF reinforce.evidence_id IS NOT NULL THEN
        PERFORM FROM prme.events AS e
        WHERE e.user_id = v_user_id AND e.id = reinforce.evidence_id AND e.scope = v_node.scope;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'evidence not found';
        END IF;
    END IF;

    -- 5. Additive caps; salience_base is unchanged.
    v_after := v_node;
    v_after.reinforcement_boost := prme._reinforced_boost(v_node.reinforcement_boost);
    v_after.confidence_base := prme._reinforced_confidence(v_node.confidence_base);
    v_after.last_reinforced_at := v_now;
    v_after.updated_at := v_now;
    IF reinforce.evidence_id IS NOT NULL THEN
        v_after.evidence_refs := v_node.evidence_refs || reinforce.evidence_id;
    END IF;
    v_after.version := v_node.version + 1;
    -- 7. The explicit_reinforcement outcome is this confirmation's journal record,
    -- counted on the node by the same UPDATE (docs/MAINTENANCE.md).
    v_after.reinforcements := v_node.reinforcements + 1;

    -- 6. Journal record, chained to the node's previous record; it carries the key.
    v_entry := prme._journal_entry(
        'reinforce', 'additive_caps_v1', gen_random_uuid(), reinforce.request_id, reinforce.evidence_id,
        v_node, v_after
    );
    v_after.last_checksum := v_entry.checksum;

    -- No indexed column, no generated column, no trigger: a HOT update.
    UPDATE prme.nodes AS n SET
        reinforcement_boost = v_after.reinforcement_boost,
        confidence_base = v_after.confidence_base,
        last_reinforced_at = v_after.last_reinforced_at,
        updated_at = v_after.updated_at,
        evidence_refs = v_after.evidence_refs,
        version = v_after.version,
        last_checksum = v_after.last_checksum,
        reinforcements = v_after.reinforcements
    WHERE n.user_id = v_user_id AND n.id = reinforce.node_id;

    -- The record claims the key (journal_request_key). Every call that claims a key
    -- holds its advisory lock, so no API call can have claimed it since the check
    -- above: a plain INSERT, no speculative insertion (ON CONFLICT).
    INSERT INTO prme.journal SELECT v_entry.*;

    RETURN prme._node_view(v_after, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.reinforce(uuid, text, uuid, uuid) IS
'Confirms a memory of user_id (DESIGN.md section 3): boost +0.15 capped at 0.5, confidence +0.05 capped at 0.95, '
'never reduced; evidence_id appended to evidence_refs; journaled, and the journal record is its '
'explicit_reinforcement outcome and carries its key. With request_id, a retry of the same call returns the '
'current node with replayed = true and writes nothing; reuse for anything else raises PR409. PR404 for a '
'missing, foreign or archived node, or evidence of another owner or scope.';

-- >>> sql/postgres/200_node_maintenance.sql

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

-- >>> sql/postgres/210_outcomes.sql

CREATE OR REPLACE FUNCTION prme._outcome_weight(outcome text)
RETURNS numeric
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN CASE outcome
    WHEN 'explicit_reinforcement' THEN 1.0
    WHEN 'implicit_success' THEN 0.2
    WHEN 'neutral_exposure' THEN 0
    WHEN 'explicit_correction' THEN -1.0
END;

COMMENT ON FUNCTION prme._outcome_weight(text) IS
'Internal: the weight of an outcome: explicit_reinforcement 1.0, implicit_success 0.2, neutral_exposure 0, '
'explicit_correction -1.0; NULL for anything else.';

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

    -- The running totals on the memory's row (HOT: no indexed column changes).
    UPDATE prme.nodes AS n SET
        recorded_reinforcements = n.recorded_reinforcements + (v_row.outcome = 'explicit_reinforcement')::integer,
        implicit_successes = n.implicit_successes + (v_row.outcome = 'implicit_success')::integer,
        neutral_exposures = n.neutral_exposures + (v_row.outcome = 'neutral_exposure')::integer,
        explicit_corrections = n.explicit_corrections + (v_row.outcome = 'explicit_correction')::integer,
        last_outcome_at = greatest(n.last_outcome_at, v_row.created_at)
    WHERE n.user_id = v_row.user_id AND n.id = v_row.node_id;
    RETURN v_row;
END;
$$;

COMMENT ON FUNCTION prme._add_outcome(text, uuid, text, uuid, text, text, text, uuid, text, bigint, timestamptz) IS
'Internal: appends one outcome event and adds it to the running totals on the memory''s row. The caller has '
'validated the arguments and holds a lock on the node.';

CREATE OR REPLACE FUNCTION prme._suggested_stability(
    explicit_reinforcements bigint,
    implicit_successes bigint,
    neutral_exposures bigint,
    explicit_corrections bigint
)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Corrections weigh most: one is enough for low. Only explicit confirmation
    -- reaches stable; silent successes never do.
    IF explicit_corrections > 0
       OR explicit_reinforcements * prme._outcome_weight('explicit_reinforcement')
       + implicit_successes * prme._outcome_weight('implicit_success')
       + neutral_exposures * prme._outcome_weight('neutral_exposure')
       + explicit_corrections * prme._outcome_weight('explicit_correction') < 0 THEN
        RETURN 'low';
    END IF;
    IF explicit_reinforcements >= 2 THEN
        RETURN 'stable';
    END IF;
    RETURN 'semi-stable';
END;
$$;

COMMENT ON FUNCTION prme._suggested_stability(bigint, bigint, bigint, bigint) IS
'Internal: the stability outcome counts suggest: low if any explicit correction or a negative score; stable only '
'with at least 2 explicit reinforcements; otherwise semi-stable.';

CREATE OR REPLACE FUNCTION prme.record_outcome(
    user_id text,
    node_id uuid,
    outcome text,
    evidence_id uuid DEFAULT NULL,
    profile_id text DEFAULT NULL,
    thread_id text DEFAULT NULL,
    notes text DEFAULT NULL,
    request_id uuid DEFAULT NULL
)
RETURNS prme.outcome_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(record_outcome.user_id);
    v_outcome text := prme._valid_outcome(record_outcome.outcome);
    v_profile_id text := prme._valid_ref('profile_id', record_outcome.profile_id);
    v_thread_id text := prme._valid_ref('thread_id', record_outcome.thread_id);
    v_notes text := prme._valid_notes(record_outcome.notes);
    v_node prme.nodes;
    v_row prme.outcomes;
BEGIN
    IF record_outcome.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;

    -- Replay check before any lock, as reinforce does: a plain read, no WAL.
    IF record_outcome.request_id IS NOT NULL THEN
        SELECT n.* INTO v_node
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id AND n.id = record_outcome.node_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
        END IF;
        v_row := prme._outcome_replay(
            v_user_id, v_node.namespace, record_outcome.request_id, record_outcome.node_id, v_outcome,
            record_outcome.evidence_id, v_profile_id, v_thread_id, v_notes
        );
        IF v_row.id IS NOT NULL THEN
            RETURN prme._outcome_view(v_row, TRUE);
        END IF;
    END IF;

    -- The key's advisory lock (prme._key_lock, which reinforce also takes) before the
    -- row lock, in reinforce's order: taken the other way round, this share lock and
    -- reinforce's FOR UPDATE could each wait for the other.
    IF record_outcome.request_id IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(prme._key_lock(v_user_id, v_node.namespace, record_outcome.request_id));
    END IF;

    -- The outcome does not change the node's state, so a share lock is enough: it
    -- keeps the node from being archived (or otherwise mutated) until we commit.
    -- Adding to the totals on its row later waits only for another outcome's.
    SELECT n.* INTO v_node
    FROM prme.nodes AS n
    WHERE n.user_id = v_user_id AND n.id = record_outcome.node_id
    FOR KEY SHARE;
    IF NOT FOUND OR v_node.lifecycle_state = 'archived' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;

    IF record_outcome.evidence_id IS NOT NULL THEN
        PERFORM FROM prme.events AS e
        WHERE e.user_id = v_user_id AND e.id = record_outcome.evidence_id AND e.scope = v_node.scope;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'evidence not found';
        END IF;
    END IF;

    -- Claim the key before appending: share locks do not serialise calls, the key
    -- does. Its advisory lock, held since above, orders this call after any call that
    -- claimed the same key (a confirmation's key is its journal record: PR409). A
    -- conflict on the key row waits for the other call; if it committed, this is its
    -- replay (or PR409 when the key is bound to anything else).
    IF record_outcome.request_id IS NOT NULL THEN
        v_row := prme._outcome_replay(
            v_user_id, v_node.namespace, record_outcome.request_id, record_outcome.node_id, v_outcome,
            record_outcome.evidence_id, v_profile_id, v_thread_id, v_notes
        );
        IF v_row.id IS NOT NULL THEN
            RETURN prme._outcome_view(v_row, TRUE);
        END IF;
        INSERT INTO prme.request_keys (
            user_id, namespace, request_id, operation, node_id, evidence_id, node_version, created_at
        ) VALUES (
            v_user_id, v_node.namespace, record_outcome.request_id, 'record_outcome', record_outcome.node_id,
            record_outcome.evidence_id, v_node.version, now()
        )
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            v_row := prme._outcome_replay(
                v_user_id, v_node.namespace, record_outcome.request_id, record_outcome.node_id, v_outcome,
                record_outcome.evidence_id, v_profile_id, v_thread_id, v_notes
            );
            IF v_row.id IS NOT NULL THEN
                RETURN prme._outcome_view(v_row, TRUE);
            END IF;
            RAISE EXCEPTION USING
                ERRCODE = 'PR409',
                MESSAGE = 'request_id was already used for another request',
                DETAIL = 'an idempotency key is bound to one operation, node and evidence';
        END IF;
    END IF;

    v_row := prme._add_outcome(
        v_user_id, record_outcome.node_id, v_outcome, record_outcome.evidence_id, v_profile_id, v_thread_id,
        v_notes, record_outcome.request_id, 'record_outcome', v_node.version, now()
    );
    RETURN prme._outcome_view(v_row, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.record_outcome(text, uuid, text, uuid, text, text, text, uuid) IS
'Appends an outcome event (explicit_reinforcement, implicit_success, neutral_exposure or explicit_correction) to a '
'memory of user_id; the memory itself is not changed. With request_id, a retry with the same arguments returns '
'the stored outcome with replayed = true and writes nothing; reuse with anything else raises PR409. PR404 for a '
'missing, foreign or archived node, or evidence of another owner or scope; PR422 for invalid arguments.';

CREATE OR REPLACE FUNCTION prme._outcome_replay(
    user_id text,
    namespace text,
    request_id uuid,
    node_id uuid,
    outcome text,
    evidence_id uuid,
    profile_id text,
    thread_id text,
    notes text
)
RETURNS prme.outcomes
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_row prme.outcomes;
BEGIN
    IF NOT prme._is_replay(
        _outcome_replay.user_id, _outcome_replay.namespace, _outcome_replay.request_id, 'record_outcome',
        _outcome_replay.node_id, _outcome_replay.evidence_id
    ) THEN
        RETURN NULL;
    END IF;
    SELECT o.* INTO STRICT v_row
    FROM prme.outcomes AS o
    WHERE o.user_id = _outcome_replay.user_id
      AND o.node_id = _outcome_replay.node_id
      AND o.request_id = _outcome_replay.request_id;
    IF v_row.outcome IS DISTINCT FROM _outcome_replay.outcome
       OR v_row.profile_id IS DISTINCT FROM _outcome_replay.profile_id
       OR v_row.thread_id IS DISTINCT FROM _outcome_replay.thread_id
       OR v_row.notes IS DISTINCT FROM _outcome_replay.notes THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR409',
            MESSAGE = 'request_id was already used for another request',
            DETAIL = 'this key recorded another outcome, profile_id, thread_id or notes';
    END IF;
    RETURN v_row;
END;
$$;

COMMENT ON FUNCTION prme._outcome_replay(text, text, uuid, uuid, text, uuid, text, text, text) IS
'Internal (volatile: reads with a fresh snapshot): the stored outcome when request_id already recorded exactly '
'this outcome (a replay); NULL when the key is unused; PR409 when it is bound to anything else.';

CREATE OR REPLACE FUNCTION prme.outcome_summary(user_id text, node_id uuid)
RETURNS TABLE (
    explicit_reinforcements bigint,
    implicit_successes bigint,
    neutral_exposures bigint,
    explicit_corrections bigint,
    outcomes bigint,
    score numeric,
    suggested_stability text,
    last_outcome_at timestamptz
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(outcome_summary.user_id);
    v_node prme.nodes;
BEGIN
    IF outcome_summary.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    SELECT n.* INTO v_node FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = outcome_summary.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;

    -- Confirmations and explicit_reinforcement outcome rows are counted apart.
    explicit_reinforcements := v_node.recorded_reinforcements + v_node.reinforcements;
    implicit_successes := v_node.implicit_successes;
    neutral_exposures := v_node.neutral_exposures;
    explicit_corrections := v_node.explicit_corrections;
    outcomes := explicit_reinforcements + implicit_successes + neutral_exposures + explicit_corrections;
    score := explicit_reinforcements * prme._outcome_weight('explicit_reinforcement')
        + implicit_successes * prme._outcome_weight('implicit_success')
        + neutral_exposures * prme._outcome_weight('neutral_exposure')
        + explicit_corrections * prme._outcome_weight('explicit_correction');
    suggested_stability := prme._suggested_stability(
        explicit_reinforcements, implicit_successes, neutral_exposures, explicit_corrections
    );
    -- The newest confirmation is a counted one (the counted ones are the newest).
    last_outcome_at := greatest(
        v_node.last_outcome_at, CASE WHEN v_node.reinforcements > 0 THEN v_node.last_reinforced_at END
    );
    RETURN NEXT;
END;
$$;

COMMENT ON FUNCTION prme.outcome_summary(text, uuid) IS
'The outcome summary of a memory of user_id over all its outcomes: counts per outcome, score (sum of weights) and '
'suggested stability (low if any correction or score < 0; stable only from at least 2 explicit reinforcements; '
'otherwise semi-stable). PR404 when the node is missing or foreign.';

-- >>> sql/postgres/215_node_outcomes.sql

CREATE OR REPLACE FUNCTION prme.node_outcomes(user_id text, node_id uuid, max_count integer DEFAULT 100)
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

-- >>> sql/postgres/240_reviews_and_decay.sql

CREATE OR REPLACE FUNCTION prme.mark_reviewed(user_id text, node_id uuid, next_review_at timestamptz DEFAULT NULL)
RETURNS prme.node_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(mark_reviewed.user_id);
    v_next timestamptz := prme._valid_timestamp('next_review_at', mark_reviewed.next_review_at);
    v_node prme.nodes;
    v_after prme.nodes;
    v_entry prme.journal;
    v_now timestamptz := now();
BEGIN
    IF mark_reviewed.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    IF v_next <= v_now THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'next_review_at must be in the future',
            DETAIL = format('got %s', v_next);
    END IF;

    SELECT n.* INTO v_node
    FROM prme.nodes AS n
    WHERE n.user_id = v_user_id AND n.id = mark_reviewed.node_id
    FOR UPDATE;
    IF NOT FOUND OR v_node.lifecycle_state = 'archived' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;

    v_after := v_node;
    v_after.next_review_at := coalesce(
        v_next, prme._plus_cadence(v_now, (prme._maintenance_setting(v_user_id, v_node.stability)).review_cadence)
    );
    v_after.updated_at := v_now;
    v_after.version := v_node.version + 1;
    v_entry := prme._journal_entry('review', 'maintenance_v1', gen_random_uuid(), NULL, NULL, v_node, v_after);
    v_after.last_checksum := v_entry.checksum;

    -- The review covers every outcome recorded so far (recorders hold a share lock
    -- on the node, so all of them have committed by the time we hold ours) and
    -- every confirmation: it settles the totals on the row it updates anyway.
    -- Counts only grow (outcomes are append-only), so greatest() makes settling
    -- idempotent and order-independent.
    UPDATE prme.nodes AS n SET
        next_review_at = v_after.next_review_at,
        updated_at = v_after.updated_at,
        version = v_after.version,
        last_checksum = v_after.last_checksum,
        reviewed_explicit_reinforcements
        = greatest(n.reviewed_explicit_reinforcements, n.recorded_reinforcements + n.reinforcements),
        reviewed_implicit_successes = greatest(n.reviewed_implicit_successes, n.implicit_successes),
        reviewed_neutral_exposures = greatest(n.reviewed_neutral_exposures, n.neutral_exposures),
        reviewed_explicit_corrections = greatest(n.reviewed_explicit_corrections, n.explicit_corrections),
        reviewed_at = v_now
    WHERE n.user_id = v_user_id AND n.id = mark_reviewed.node_id;
    INSERT INTO prme.journal SELECT v_entry.*;

    RETURN prme._node_view(v_after, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.mark_reviewed(text, uuid, timestamptz) IS
'Records that the owner reviewed a memory of user_id: next_review_at becomes the given future time, else now plus '
'the review cadence of its stability (this resets decay), and every outcome so far counts as seen by the review. '
'Journaled as op review. PR404 for a missing, foreign or archived node.';

-- >>> sql/postgres/250_maintenance_report.sql

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
        c.lifecycle_state,
        c.stability,
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

-- >>> sql/postgres/260_patches.sql

CREATE OR REPLACE FUNCTION prme.maintenance_patch(user_id text, as_of timestamptz DEFAULT NULL)
RETURNS prme.patch_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(maintenance_patch.user_id);
    v_as_of timestamptz := coalesce(prme._valid_timestamp('as_of', maintenance_patch.as_of), now());
    v_patch_id uuid := gen_random_uuid();
BEGIN
    -- A patch for the future would decay cycles that have not begun yet.
    IF v_as_of > now() THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'as_of of a patch must not be in the future',
            DETAIL = format('got %s', v_as_of);
    END IF;
    INSERT INTO prme.maintenance_patches (user_id, id, as_of, created_at)
    VALUES (v_user_id, v_patch_id, v_as_of, now());

    INSERT INTO prme.patch_ops (
        user_id, patch_id, op_no, op_id, op, recommendation, node_id, node_version, reason, risk, requires_review,
        default_selected, stability_from, stability_to, confidence_from, confidence_to, lifecycle_from,
        lifecycle_to, decay_anchor, decay_cycles_from, decay_cycles_to, seen_explicit_reinforcements,
        seen_implicit_successes, seen_neutral_exposures, seen_explicit_corrections, operation_id
    )
    SELECT
        v_user_id,
        v_patch_id,
        q.op_no,
        'op_' || CASE WHEN q.op_no < 1000 THEN lpad(q.op_no::text, 3, '0') ELSE q.op_no::text END,
        q.op,
        q.recommendation,
        q.node_id,
        q.version,
        CASE q.recommendation
            WHEN 'decay_confidence' THEN format(
                'overdue for review since %s: cycles %s to %s of %s decayed at -%s each',
                to_char(q.next_review_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                q.decayed_cycles + 1, q.overdue_cycles, q.review_cadence, trim_scale(q.decay_per_cycle)
            )
            WHEN 'increase_stability' THEN format(
                '%s explicit reinforcements and no correction since the last review', q.explicit_reinforcements
            )
            WHEN 'flag_for_review' THEN format(
                '%s implicit successes and no correction since the last review: semi-stable at most, stable '
                'needs explicit confirmation', q.implicit_successes
            )
            ELSE format('%s explicit correction(s) since the last review', q.explicit_corrections)
        END,
        q.risk,
        q.requires_review,
        q.default_selected,
        CASE WHEN q.op = 'update_stability' THEN q.stability END,
        CASE WHEN q.op = 'update_stability' THEN q.suggested_stability END,
        CASE WHEN q.op = 'decay_confidence' THEN q.confidence_base END,
        CASE WHEN q.op = 'decay_confidence' THEN q.suggested_confidence END,
        CASE WHEN q.op = 'mark_contested' THEN q.lifecycle_state END,
        CASE WHEN q.op = 'mark_contested' THEN 'contested' END,
        CASE WHEN q.op = 'decay_confidence' THEN q.next_review_at END,
        CASE WHEN q.op = 'decay_confidence' THEN q.decayed_cycles END,
        CASE WHEN q.op = 'decay_confidence' THEN q.overdue_cycles END,
        -- What a review applying this op has seen: every outcome up to as_of.
        coalesce(q.reviewed_explicit_reinforcements, 0) + q.explicit_reinforcements,
        coalesce(q.reviewed_implicit_successes, 0) + q.implicit_successes,
        coalesce(q.neutral_exposures, 0),
        coalesce(q.reviewed_explicit_corrections, 0) + q.explicit_corrections,
        gen_random_uuid()
    FROM (
        SELECT
            row_number() OVER (ORDER BY r.node_id, k.ord)::integer AS op_no,
            k.op,
            k.recommendation,
            k.risk,
            k.requires_review,
            k.default_selected,
            r.*,
            s.review_cadence,
            s.decay_per_cycle,
            n.reviewed_explicit_reinforcements,
            n.reviewed_implicit_successes,
            n.neutral_exposures,
            n.reviewed_explicit_corrections,
            n.version
        FROM prme.maintenance_report(v_user_id, v_as_of) AS r
        CROSS JOIN LATERAL unnest(r.recommendations) AS u (recommendation)
        INNER JOIN (
            VALUES
            ('decay_confidence', 1, 'decay_confidence', 'low', FALSE, TRUE),
            ('increase_stability', 2, 'update_stability', 'low', FALSE, TRUE),
            ('decrease_stability', 2, 'update_stability', 'medium', TRUE, TRUE),
            ('flag_for_review', 2, 'update_stability', 'medium', TRUE, FALSE),
            ('mark_contested', 3, 'mark_contested', 'high', TRUE, FALSE)
        ) AS k (recommendation, ord, op, risk, requires_review, default_selected)
            ON k.recommendation = u.recommendation
        INNER JOIN (
            SELECT DISTINCT ON (x.stability) x.stability, x.review_cadence, x.decay_per_cycle
            FROM prme.maintenance_settings AS x
            WHERE x.user_id IN (v_user_id, '*')
            ORDER BY x.stability, x.user_id = '*'
        ) AS s ON s.stability = r.stability
        INNER JOIN prme.nodes AS n ON n.user_id = v_user_id AND n.id = r.node_id
    ) AS q;

    RETURN prme._patch_document(v_user_id, v_patch_id);
END;
$$;

COMMENT ON FUNCTION prme.maintenance_patch(text, timestamptz) IS
'Computes the maintenance report of user_id as of a time (default now; not in the future) and stores its '
'actionable recommendations as a patch for review: returns patch_id, created_at, as_of and ops, each with op_id, '
'op (update_stability, decay_confidence or mark_contested), target, updates (from -> to), reason, risk, '
'requires_review and default_selected. Changes no memory; apply with prme.apply_patch.';

CREATE OR REPLACE FUNCTION prme._apply_patch_op(
    op prme.patch_ops,
    OUT status text,
    OUT detail text,
    OUT node_version bigint
)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_node prme.nodes;
    v_after prme.nodes;
    v_entry prme.journal;
    v_done integer;
    v_now timestamptz := now();
BEGIN
    status := 'stale';
    SELECT n.* INTO v_node
    FROM prme.nodes AS n
    WHERE n.user_id = op.user_id AND n.id = op.node_id
    FOR UPDATE;
    IF NOT FOUND OR v_node.lifecycle_state NOT IN ('active', 'contested') THEN
        detail := format('the memory is %s', coalesce(v_node.lifecycle_state, 'gone'));
        RETURN;
    END IF;
    v_after := v_node;

    CASE op.op
        WHEN 'decay_confidence' THEN
            v_done := CASE WHEN v_node.decay_anchor = v_node.next_review_at THEN v_node.decay_cycles ELSE 0 END;
            IF v_node.next_review_at IS DISTINCT FROM op.decay_anchor THEN
                detail := 'the review schedule changed since the patch was proposed';
                RETURN;
            END IF;
            IF v_done <> op.decay_cycles_from THEN
                detail := format('%s overdue cycles are decayed already, the patch expected %s',
                    v_done, op.decay_cycles_from);
                RETURN;
            END IF;
            IF v_node.confidence_base <> op.confidence_from THEN
                detail := format('confidence_base is %s now, the patch expected %s',
                    trim_scale(v_node.confidence_base), trim_scale(op.confidence_from));
                RETURN;
            END IF;
            v_after.confidence_base := op.confidence_to;
        WHEN 'update_stability' THEN
            IF v_node.stability <> op.stability_from THEN
                detail := format('stability is %s now, the patch expected %s', v_node.stability, op.stability_from);
                RETURN;
            END IF;
            IF op.recommendation IN ('increase_stability', 'flag_for_review') AND v_node.lifecycle_state <> 'active' THEN
                detail := format('the memory is %s: stability is raised for active memories only',
                    v_node.lifecycle_state);
                RETURN;
            END IF;
            -- A stability change is a review: the cadence restarts from now.
            v_after.stability := op.stability_to;
            v_after.next_review_at := prme._plus_cadence(
                v_now, (prme._maintenance_setting(op.user_id, op.stability_to)).review_cadence
            );
        ELSE
            IF v_node.lifecycle_state <> op.lifecycle_from THEN
                detail := format('lifecycle_state is %s now, the patch expected %s',
                    v_node.lifecycle_state, op.lifecycle_from);
                RETURN;
            END IF;
            v_after.lifecycle_state := op.lifecycle_to;
    END CASE;

    v_after.updated_at := v_now;
    v_after.version := v_node.version + 1;
    v_entry := prme._journal_entry(op.op, 'maintenance_v1', op.operation_id, NULL, NULL, v_node, v_after);
    v_after.last_checksum := v_entry.checksum;
    -- Decay records its cycles; stability changes and mark_contested are reviewed
    -- decisions, which settle the outcomes the proposal saw (as mark_reviewed does).
    UPDATE prme.nodes AS n SET
        confidence_base = v_after.confidence_base,
        stability = v_after.stability,
        next_review_at = v_after.next_review_at,
        lifecycle_state = v_after.lifecycle_state,
        updated_at = v_after.updated_at,
        version = v_after.version,
        last_checksum = v_after.last_checksum,
        decay_anchor = CASE WHEN op.op = 'decay_confidence' THEN op.decay_anchor ELSE n.decay_anchor END,
        decay_cycles = CASE WHEN op.op = 'decay_confidence' THEN op.decay_cycles_to ELSE n.decay_cycles END,
        reviewed_explicit_reinforcements = CASE WHEN op.op = 'decay_confidence' THEN n.reviewed_explicit_reinforcements
            ELSE greatest(n.reviewed_explicit_reinforcements, op.seen_explicit_reinforcements) END,
        reviewed_implicit_successes = CASE WHEN op.op = 'decay_confidence' THEN n.reviewed_implicit_successes
            ELSE greatest(n.reviewed_implicit_successes, op.seen_implicit_successes) END,
        reviewed_neutral_exposures = CASE WHEN op.op = 'decay_confidence' THEN n.reviewed_neutral_exposures
            ELSE greatest(n.reviewed_neutral_exposures, op.seen_neutral_exposures) END,
        reviewed_explicit_corrections = CASE WHEN op.op = 'decay_confidence' THEN n.reviewed_explicit_corrections
            ELSE greatest(n.reviewed_explicit_corrections, op.seen_explicit_corrections) END,
        reviewed_at = CASE WHEN op.op = 'decay_confidence' THEN n.reviewed_at ELSE v_now END
    WHERE n.user_id = op.user_id AND n.id = op.node_id;
    INSERT INTO prme.journal SELECT v_entry.*;

    status := 'applied';
    node_version := v_after.version;
END;
$$;

COMMENT ON FUNCTION prme._apply_patch_op(prme.patch_ops) IS
'Internal: applies one patch op under the memory''s row lock if the memory still shows what the op expects '
'(else status stale, with the reason in detail), journaled as op decay_confidence, update_stability or '
'mark_contested with policy maintenance_v1. The caller holds the op row lock and records the application.';

-- >>> sql/postgres/110_reinforce.sql: _key_replays is now _is_replay

DROP FUNCTION prme._key_replays(text, text, uuid, text, uuid, uuid);

-- >>> sql/postgres/210_outcomes.sql: the weights defined once (prme._outcome_weight)

ALTER TABLE prme.outcomes
DROP CONSTRAINT outcomes_check,
ADD CONSTRAINT outcomes_check CHECK (weight = prme._outcome_weight(outcome));

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (18, 'report_on_the_memory_row', 'e3d898c55911176c1e3451121e533100b3a9343f8f6efe8d043a8b1c5240e3f3');

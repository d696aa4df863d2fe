-- =============================================================================
-- prme-pg: outcomes (reinforcement outcome events)
--
-- What happened when a memory was used, as append-only evidence:
--   explicit_reinforcement  +1.0  the owner confirmed it (prme.reinforce adds one)
--   implicit_success        +0.2  it was used and nothing went wrong
--   neutral_exposure         0    it was shown, nothing more
--   explicit_correction     -1.0  the owner corrected it
-- An outcome never changes its node's state: maintenance (250, 260) turns outcomes into
-- reviewed, journaled changes. Each outcome row also adds to its memory's running
-- totals on the memory's row (200), in the same transaction, so the maintenance
-- report reads one row per memory instead of aggregating every outcome.
-- A confirmation (prme.reinforce) writes no row here: its explicit_reinforcement
-- outcome is its journal record, counted by prme.nodes.reinforcements (the rows
-- recorded_by 'reinforce' that confirmations wrote in earlier releases are kept, and
-- read through the journal like the newer ones).
-- record_outcome is idempotent by request_id like reinforce: the key lives in
-- prme.request_keys (operation 'record_outcome'), bound to the node and evidence,
-- and to the journal record of the node state the outcome was recorded against;
-- the other arguments are compared with the stored outcome. See docs/MAINTENANCE.md.
-- =============================================================================

-- The weight of each kind of outcome, defined here once: the table's CHECK, the
-- rows _add_outcome writes, and the scores of outcome_summary and
-- _stability_by_outcomes use it. A SQL-standard body: inlined (and folded to a
-- constant for a constant outcome).
CREATE FUNCTION prme._outcome_weight(outcome text)
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

CREATE TABLE prme.outcomes (
    user_id text NOT NULL,
    id uuid NOT NULL,
    node_id uuid NOT NULL,
    outcome text NOT NULL
    CHECK (outcome IN ('explicit_reinforcement', 'implicit_success', 'neutral_exposure', 'explicit_correction')),
    weight numeric(3, 2) NOT NULL,
    evidence_id uuid,
    profile_id text CHECK (length(profile_id) BETWEEN 1 AND 256),
    thread_id text CHECK (length(thread_id) BETWEEN 1 AND 256),
    notes text CHECK (octet_length(notes) <= 65536),
    request_id uuid,
    recorded_by text NOT NULL
    CHECK (recorded_by IN ('record_outcome', 'reinforce', 'link_correction', 'resolve_correction')),
    node_version bigint NOT NULL CHECK (node_version > 0),
    created_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, id),
    FOREIGN KEY (user_id, node_id) REFERENCES prme.nodes (user_id, id),
    -- evidence_id is checked by the functions that append (same owner and scope as
    -- the node); no foreign key, so prme.events stays a table nothing references.
    -- The weight is a function of the outcome; stored so a row reads on its own.
    CONSTRAINT outcomes_check CHECK (weight = prme._outcome_weight(outcome))
);

COMMENT ON TABLE prme.outcomes IS
'Append-only outcome events of memories (explicit_reinforcement +1.0, implicit_success +0.2, neutral_exposure 0, '
'explicit_correction -1.0). Updates and deletes are refused. See docs/MAINTENANCE.md.';
COMMENT ON COLUMN prme.outcomes.node_version IS
'The node version the outcome was recorded against (for reinforce: the version it produced).';
COMMENT ON COLUMN prme.outcomes.recorded_by IS
'The API function that appended the event: record_outcome, reinforce, link_correction or resolve_correction.';

-- A memory's outcomes in time order (the maintenance report leaves out those newer
-- than its as_of with a range scan here).
CREATE INDEX outcomes_node_idx ON prme.outcomes (user_id, node_id, created_at);
-- One outcome per request: the replay of record_outcome finds its outcome here.
CREATE UNIQUE INDEX outcomes_request_key ON prme.outcomes (user_id, node_id, request_id)
WHERE request_id IS NOT NULL;

CREATE TRIGGER outcomes_append_only
BEFORE UPDATE OR DELETE ON prme.outcomes
FOR EACH ROW EXECUTE FUNCTION prme._refuse_change();

CREATE TRIGGER outcomes_no_truncate
BEFORE TRUNCATE ON prme.outcomes
FOR EACH STATEMENT EXECUTE FUNCTION prme._refuse_change();

-- What record_outcome returns: the outcome plus whether a retried request was
-- answered from its idempotency key.
CREATE TYPE prme.outcome_view AS (
    id uuid,
    user_id text,
    node_id uuid,
    outcome text,
    weight numeric(3, 2),  -- noqa: LT01
    evidence_id uuid,
    profile_id text,
    thread_id text,
    notes text,
    request_id uuid,
    recorded_by text,
    node_version bigint,
    created_at timestamptz,
    replayed boolean
);

COMMENT ON TYPE prme.outcome_view IS
'An outcome event as record_outcome returns it: every column of prme.outcomes plus replayed.';

CREATE FUNCTION prme._outcome_view(outcome prme.outcomes, replayed boolean)
RETURNS prme.outcome_view
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN ROW(
        outcome.id, outcome.user_id, outcome.node_id, outcome.outcome, outcome.weight, outcome.evidence_id,
        outcome.profile_id, outcome.thread_id, outcome.notes, outcome.request_id, outcome.recorded_by,
        outcome.node_version, outcome.created_at, replayed
    )::prme.outcome_view;
END;
$$;

COMMENT ON FUNCTION prme._outcome_view(prme.outcomes, boolean) IS
'Internal: the API view of an outcome row (adds replayed).';

CREATE FUNCTION prme._add_outcome(
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

CREATE FUNCTION prme._stability_by_outcomes(
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

COMMENT ON FUNCTION prme._stability_by_outcomes(bigint, bigint, bigint, bigint) IS
'Internal: the stability outcome counts suggest: low if any explicit correction or a negative score; stable only '
'with at least 2 explicit reinforcements; otherwise semi-stable.';

CREATE FUNCTION prme.record_outcome(
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
    -- reinforce's UPDATE could each wait for the other.
    IF record_outcome.request_id IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(prme._key_lock(v_user_id, record_outcome.request_id));
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

CREATE FUNCTION prme._outcome_replay(
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

CREATE FUNCTION prme.outcome_summary(user_id text, node_id uuid)
RETURNS TABLE (
    explicit_reinforcements bigint,
    implicit_successes bigint,
    neutral_exposures bigint,
    explicit_corrections bigint,
    outcomes bigint,
    score numeric,
    stability_by_outcomes text,
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
    stability_by_outcomes := prme._stability_by_outcomes(
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
'stability_by_outcomes (low if any correction or score < 0; stable only from at least 2 explicit reinforcements; '
'otherwise semi-stable). PR404 when the node is missing or foreign.';

REVOKE ALL ON FUNCTION prme.record_outcome(text, uuid, text, uuid, text, text, text, uuid) FROM public;
GRANT EXECUTE ON FUNCTION prme.record_outcome(text, uuid, text, uuid, text, text, text, uuid) TO prme_app;
REVOKE ALL ON FUNCTION prme.outcome_summary(text, uuid) FROM public;
GRANT EXECUTE ON FUNCTION prme.outcome_summary(text, uuid) TO prme_app;
ALTER TABLE prme.outcomes ENABLE ROW LEVEL SECURITY;

-- Readers: prme_reader the rows of the owners bound to it, prme_auditor every row
-- (015_reader_bindings.sql).
GRANT SELECT ON prme.outcomes TO prme_reader, prme_auditor;
CREATE POLICY outcomes_reader_owner ON prme.outcomes FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY outcomes_auditor_all ON prme.outcomes FOR SELECT TO prme_auditor USING (TRUE);

-- prme-pg migration 0003_outcomes_and_maintenance: reinforcement outcomes, correction linking,
-- maintenance settings, reviews and decay, the maintenance report and patches; reinforce appends
-- an explicit_reinforcement outcome event. See docs/MAINTENANCE.md.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/200_node_maintenance.sql

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

-- >>> sql/postgres/210_outcomes.sql

-- =============================================================================
-- prme-pg: outcomes (reinforcement outcome events)
--
-- What happened when a memory was used, as append-only evidence:
--   explicit_reinforcement  +1.0  the owner confirmed it (prme.reinforce adds one)
--   implicit_success        +0.2  it was used and nothing went wrong
--   neutral_exposure         0    it was shown, nothing more
--   explicit_correction     -1.0  the owner corrected it
-- An outcome never changes its node: maintenance (250, 260) turns outcomes into
-- reviewed, journaled changes. Each outcome also adds to its memory's running
-- totals in prme.node_maintenance (200), in the same transaction, so the
-- maintenance report reads one row per memory instead of aggregating every outcome.
-- record_outcome is idempotent by request_id like reinforce: the key lives in
-- prme.request_keys (operation 'record_outcome'), bound to the node and evidence,
-- and to the journal record of the node state the outcome was recorded against;
-- the other arguments are compared with the stored outcome. See docs/MAINTENANCE.md.
-- =============================================================================

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
    CHECK (weight = CASE outcome
        WHEN 'explicit_reinforcement' THEN 1.0
        WHEN 'implicit_success' THEN 0.2
        WHEN 'neutral_exposure' THEN 0
        WHEN 'explicit_correction' THEN -1.0
    END)
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

CREATE FUNCTION prme._outcome_weight(outcome text)
RETURNS numeric
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN CASE outcome
        WHEN 'explicit_reinforcement' THEN 1.0
        WHEN 'implicit_success' THEN 0.2
        WHEN 'neutral_exposure' THEN 0
        WHEN 'explicit_correction' THEN -1.0
    END;
END;
$$;

COMMENT ON FUNCTION prme._outcome_weight(text) IS
'Internal: the weight of an outcome: explicit_reinforcement 1.0, implicit_success 0.2, neutral_exposure 0, '
'explicit_correction -1.0; NULL for anything else.';

CREATE FUNCTION prme._valid_outcome(outcome text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF prme._outcome_weight(outcome) IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'outcome must be explicit_reinforcement, implicit_success, neutral_exposure or explicit_correction',
            DETAIL = format('got %s', coalesce(quote_literal(left(outcome, 80)), 'NULL'));
    END IF;
    RETURN outcome;
END;
$$;

COMMENT ON FUNCTION prme._valid_outcome(text) IS
'Internal: returns outcome when it is one of the four outcome kinds, else raises PR422.';

CREATE FUNCTION prme._valid_ref(argument text, value text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- An explicit control-character set (C0, DEL, C1): [[:cntrl:]] depends on the locale.
    IF value IS NOT NULL
       AND (length(value) NOT BETWEEN 1 AND 256 OR value ~ '[\x01-\x1f\x7f-\x9f]' OR value <> btrim(value)) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('%s must be 1 to 256 characters without control characters or surrounding spaces',
                argument);
    END IF;
    RETURN value;
END;
$$;

COMMENT ON FUNCTION prme._valid_ref(text, text) IS
'Internal: returns value (NULL allowed) when it is a valid external reference such as profile_id or thread_id '
'(1 to 256 characters, no control characters or surrounding spaces), else raises PR422.';

CREATE FUNCTION prme._valid_notes(notes text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF octet_length(notes) > 65536 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'notes must be at most 65536 bytes',
            DETAIL = format('got %s bytes', octet_length(notes));
    END IF;
    RETURN notes;
END;
$$;

COMMENT ON FUNCTION prme._valid_notes(text) IS
'Internal: returns notes (NULL allowed) when it is at most 64 KiB of UTF-8, else raises PR422.';

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

    UPDATE prme.node_maintenance AS k SET
        explicit_reinforcements = k.explicit_reinforcements + (v_row.outcome = 'explicit_reinforcement')::integer,
        implicit_successes = k.implicit_successes + (v_row.outcome = 'implicit_success')::integer,
        neutral_exposures = k.neutral_exposures + (v_row.outcome = 'neutral_exposure')::integer,
        explicit_corrections = k.explicit_corrections + (v_row.outcome = 'explicit_correction')::integer,
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
'Internal: appends one outcome event and adds it to the node''s running totals in prme.node_maintenance. '
'The caller has validated the arguments and holds a lock on the node.';

CREATE FUNCTION prme._suggested_stability(
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
       OR explicit_reinforcements * 1.0 + implicit_successes * 0.2 + neutral_exposures * 0
       - explicit_corrections * 1.0 < 0 THEN
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

    -- The outcome does not change the node, so a share lock is enough: it keeps
    -- the node from being archived (or otherwise mutated) until we commit.
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
    -- does. A conflict waits for the other call; if it committed, this is its replay
    -- (or PR409 when the key is bound to anything else).
    IF record_outcome.request_id IS NOT NULL THEN
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
    IF NOT prme._key_replays(
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
    v_summary prme.node_maintenance;
BEGIN
    IF outcome_summary.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    PERFORM FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = outcome_summary.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
    SELECT s.* INTO v_summary
    FROM prme.node_maintenance AS s
    WHERE s.user_id = v_user_id AND s.node_id = outcome_summary.node_id;

    explicit_reinforcements := coalesce(v_summary.explicit_reinforcements, 0);
    implicit_successes := coalesce(v_summary.implicit_successes, 0);
    neutral_exposures := coalesce(v_summary.neutral_exposures, 0);
    explicit_corrections := coalesce(v_summary.explicit_corrections, 0);
    outcomes := explicit_reinforcements + implicit_successes + neutral_exposures + explicit_corrections;
    score := explicit_reinforcements * 1.0 + implicit_successes * 0.2 + neutral_exposures * 0
        - explicit_corrections * 1.0;
    suggested_stability := prme._suggested_stability(
        explicit_reinforcements, implicit_successes, neutral_exposures, explicit_corrections
    );
    last_outcome_at := v_summary.last_outcome_at;
    RETURN NEXT;
END;
$$;

COMMENT ON FUNCTION prme.outcome_summary(text, uuid) IS
'The outcome summary of a memory of user_id over all its outcomes: counts per outcome, score (sum of weights) and '
'suggested stability (low if any correction or score < 0; stable only from at least 2 explicit reinforcements; '
'otherwise semi-stable). PR404 when the node is missing or foreign.';

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;
GRANT EXECUTE ON FUNCTION prme.record_outcome(text, uuid, text, uuid, text, text, text, uuid) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.outcome_summary(text, uuid) TO prme_app;
ALTER TABLE prme.outcomes ENABLE ROW LEVEL SECURITY;

-- >>> sql/postgres/220_correction_linking.sql

-- =============================================================================
-- prme-pg: correction linking
--
-- An owner's message that corrects a memory ("no, I use spaces now") must count
-- against the memory it corrects, and only that one. link_correction compares the
-- message with candidate memories (typically what recall just showed) by token
-- overlap:
--   tokens   lower-cased runs of [a-z0-9] longer than 3 characters (a set);
--   overlap  |A ∩ B| / min(|A|, |B|), 0 when either set is empty;
--   match    overlap >= 0.45, among the candidates that are active memories of
--            the owner (others are ignored, never revealed).
-- Exactly one match appends an explicit_correction outcome to it. Zero or several
-- put the message in prme.correction_inbox for the owner to resolve, and append
-- nothing: a correction is never guessed onto a memory.
-- is_correction(message) spots explicit correction phrasing. See docs/MAINTENANCE.md.
-- =============================================================================

CREATE TABLE prme.correction_inbox (
    user_id text NOT NULL,
    id uuid NOT NULL,
    message text NOT NULL,
    thread_id text CHECK (length(thread_id) BETWEEN 1 AND 256),
    candidate_node_ids uuid[] NOT NULL,
    matched_node_ids uuid[] NOT NULL,
    reason text NOT NULL CHECK (reason IN ('no_match', 'ambiguous')),
    created_at timestamptz NOT NULL,
    resolution text CHECK (resolution IN ('linked', 'dismissed')),
    resolved_node_id uuid,
    outcome_id uuid,
    resolved_at timestamptz,
    PRIMARY KEY (user_id, id),
    FOREIGN KEY (user_id, resolved_node_id) REFERENCES prme.nodes (user_id, id),
    FOREIGN KEY (user_id, outcome_id) REFERENCES prme.outcomes (user_id, id),
    CHECK ((reason = 'ambiguous') = (cardinality(matched_node_ids) >= 2)),
    CHECK (
        (resolution IS NULL AND resolved_at IS NULL AND resolved_node_id IS NULL AND outcome_id IS NULL)
        OR (resolution = 'dismissed' AND resolved_at IS NOT NULL AND resolved_node_id IS NULL AND outcome_id IS NULL)
        OR (
            resolution = 'linked' AND resolved_at IS NOT NULL AND resolved_node_id IS NOT NULL
            AND outcome_id IS NOT NULL
        )
    )
);

COMMENT ON TABLE prme.correction_inbox IS
'Correction messages that matched no candidate memory or several: kept for the owner to link '
'(prme.resolve_correction) or dismiss. Nothing is counted against a memory until then.';

CREATE INDEX correction_inbox_open_idx ON prme.correction_inbox (user_id, created_at)
WHERE resolution IS NULL;

CREATE FUNCTION prme._correction_tokens(message text)
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Runs are cut on the ASCII classes first and lower-cased after, so no
    -- locale can turn another character into [a-z] (U+212A KELVIN SIGN lowers to k).
    RETURN ARRAY(
        SELECT DISTINCT lower(t.token)
        FROM regexp_split_to_table(message, '[^A-Za-z0-9]+') AS t (token)
        WHERE length(t.token) > 3
        ORDER BY 1
    );
END;
$$;

COMMENT ON FUNCTION prme._correction_tokens(text) IS
'Internal: the token set of a text for correction linking: distinct lower-cased runs of [a-z0-9] longer than '
'3 characters, sorted.';

CREATE FUNCTION prme._token_overlap(a text[], b text[])
RETURNS numeric
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_smaller integer := least(coalesce(cardinality(a), 0), coalesce(cardinality(b), 0));
BEGIN
    IF v_smaller = 0 THEN
        RETURN 0;
    END IF;
    RETURN (SELECT count(*) FROM unnest(a) AS x (token) WHERE x.token = ANY(b))::numeric / v_smaller;
END;
$$;

COMMENT ON FUNCTION prme._token_overlap(text[], text[]) IS
'Internal: |A ∩ B| / min(|A|, |B|) of two token sets (0 when either is empty). Matching compares exactly: '
'100 * |A ∩ B| >= 45 * min(|A|, |B|).';

CREATE FUNCTION prme.is_correction(message text)
RETURNS boolean
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- Typographic apostrophes as ASCII, runs of blanks as one space, lower case.
    v_text text := lower(regexp_replace(translate(coalesce(message, ''), '’‘`', ''''''''), '\s+', ' ', 'g'));
    -- The start of the message, or of a sentence or clause within it.
    v_start constant text := '(^|[.!?;:,] ?)\s*';
BEGIN
    RETURN
        -- "don't …", "do not …", "never …", "always …", "stop …", optionally after "please"
        v_text ~ (v_start || '(please )?(don''?t|do not|never|always|stop|quit)\M')
        -- "no, …", "nope. …", "no - …"
        OR v_text ~ (v_start || '(no|nope|nah)([,.!:;]| -)')
        -- "actually …" opening a sentence
        OR v_text ~ (v_start || '(well,? )?actually\M')
        -- "prefer X over Y", "prefer X instead of Y", "prefer X rather than Y"
        OR v_text ~ '\mprefers? \S.*\m(over|instead of|rather than)\M'
        -- "you should never …", "I always …", "we never …"
        OR v_text ~ '\m(you|i|we)( should| must| will)? (never|always)\M'
        -- "that's wrong", "that is not right", "this is incorrect"
        OR v_text ~ '\m(that|this|it)(''s| is| was) (wrong|incorrect|not (right|true|correct))\M'
        -- "I said …", "I told you …" opening a sentence
        OR v_text ~ (v_start || 'i (already )?(said|told you)\M');
END;
$$;

COMMENT ON FUNCTION prme.is_correction(text) IS
'True when a message uses explicit correction phrasing: "don''t …", "do not …", "no, …", "actually …", '
'"stop …", "prefer X over Y", "never …"/"always …" (opening a sentence, or after you/I/we), "that''s wrong", '
'"I told you …". A heuristic for routing messages to link_correction; it reads nothing.';

CREATE FUNCTION prme.link_correction(
    user_id text,
    message text,
    candidate_node_ids uuid[],
    thread_id text DEFAULT NULL
)
RETURNS TABLE (status text, node_id uuid, outcome_id uuid, inbox_id uuid, matches jsonb)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(link_correction.user_id);
    v_message text := prme._valid_content(link_correction.message);
    v_thread_id text := prme._valid_ref('thread_id', link_correction.thread_id);
    v_tokens text[];
    v_matched uuid[];
    v_node prme.nodes;
    v_outcome prme.outcomes;
    v_inbox_id uuid;
BEGIN
    IF link_correction.candidate_node_ids IS NULL
       OR cardinality(link_correction.candidate_node_ids) > 1000
       OR array_position(link_correction.candidate_node_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'candidate_node_ids must be an array of at most 1000 non-null ids';
    END IF;
    v_tokens := prme._correction_tokens(v_message);

    -- Overlap of the message with every active candidate of this owner; the match
    -- test is exact integer arithmetic: 100 * shared >= 45 * smaller.
    SELECT
        coalesce(array_agg(c.id ORDER BY c.shared::numeric / c.smaller DESC, c.id), '{}'),
        coalesce(jsonb_agg(
            jsonb_build_object('node_id', c.id, 'overlap', round(c.shared::numeric / c.smaller, 4))
            ORDER BY c.shared::numeric / c.smaller DESC, c.id
        ), '[]')
    INTO v_matched, matches
    FROM (
        SELECT
            n.id,
            (SELECT count(*) FROM unnest(t.tokens) AS x (token) WHERE x.token = ANY(v_tokens)) AS shared,
            least(cardinality(t.tokens), cardinality(v_tokens)) AS smaller
        FROM prme.nodes AS n
        CROSS JOIN LATERAL (SELECT prme._correction_tokens(n.content) AS tokens) AS t
        WHERE n.user_id = v_user_id
          AND n.id = ANY(link_correction.candidate_node_ids)
          AND n.lifecycle_state = 'active'
    ) AS c
    WHERE c.smaller > 0 AND 100 * c.shared >= 45 * c.smaller;

    IF cardinality(v_matched) = 1 THEN
        -- Share-lock the one match and re-check it under the lock (it may have been
        -- archived or contested since we read it).
        SELECT n.* INTO v_node
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id AND n.id = v_matched[1]
        FOR KEY SHARE;
        IF v_node.lifecycle_state = 'active' THEN
            v_outcome := prme._add_outcome(
                v_user_id, v_node.id, 'explicit_correction', NULL, NULL, v_thread_id, v_message, NULL,
                'link_correction', v_node.version, now()
            );
            status := 'linked';
            node_id := v_node.id;
            outcome_id := v_outcome.id;
            RETURN NEXT;
            RETURN;
        END IF;
        v_matched := '{}';
        matches := '[]';
    END IF;

    v_inbox_id := gen_random_uuid();
    INSERT INTO prme.correction_inbox (
        user_id, id, message, thread_id, candidate_node_ids, matched_node_ids, reason, created_at
    ) VALUES (
        v_user_id, v_inbox_id, v_message, v_thread_id, link_correction.candidate_node_ids, v_matched,
        CASE WHEN cardinality(v_matched) >= 2 THEN 'ambiguous' ELSE 'no_match' END, now()
    );
    status := CASE WHEN cardinality(v_matched) >= 2 THEN 'ambiguous' ELSE 'unmatched' END;
    inbox_id := v_inbox_id;
    RETURN NEXT;
END;
$$;

COMMENT ON FUNCTION prme.link_correction(text, text, uuid[], text) IS
'Links a correction message of user_id to the one candidate memory it overlaps (token overlap >= 0.45 over '
'active candidates; see docs/MAINTENANCE.md): status linked with the explicit_correction outcome appended, or '
'unmatched / ambiguous with the message put in the correction inbox and nothing appended. matches lists the '
'matching candidates with their overlap. PR422 for an empty message or more than 1000 candidates.';

CREATE FUNCTION prme.list_correction_inbox(
    user_id text,
    include_resolved boolean DEFAULT FALSE,
    max_count integer DEFAULT 100
)
RETURNS SETOF prme.correction_inbox
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(list_correction_inbox.user_id);
BEGIN
    IF list_correction_inbox.max_count IS NULL OR list_correction_inbox.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    RETURN QUERY
    SELECT i.*
    FROM prme.correction_inbox AS i
    WHERE i.user_id = v_user_id
      AND (i.resolution IS NULL OR coalesce(list_correction_inbox.include_resolved, FALSE))
    ORDER BY i.created_at, i.id
    LIMIT list_correction_inbox.max_count;
END;
$$;

COMMENT ON FUNCTION prme.list_correction_inbox(text, boolean, integer) IS
'The correction inbox of user_id, oldest first: open entries, or all with include_resolved. max_count is 1..10000.';

CREATE FUNCTION prme.resolve_correction(user_id text, inbox_id uuid, node_id uuid DEFAULT NULL)
RETURNS prme.correction_inbox
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(resolve_correction.user_id);
    v_entry prme.correction_inbox;
    v_node prme.nodes;
    v_outcome prme.outcomes;
BEGIN
    IF resolve_correction.inbox_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'inbox_id must not be null';
    END IF;
    SELECT i.* INTO v_entry
    FROM prme.correction_inbox AS i
    WHERE i.user_id = v_user_id AND i.id = resolve_correction.inbox_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'inbox entry not found';
    END IF;

    -- Resolving again the same way is a no-op that returns the entry; any other
    -- resolution of a resolved entry is a conflict.
    IF v_entry.resolution IS NOT NULL THEN
        IF v_entry.resolved_node_id IS NOT DISTINCT FROM resolve_correction.node_id THEN
            RETURN v_entry;
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = 'PR409',
            MESSAGE = 'inbox entry was already resolved otherwise',
            DETAIL = format('resolution %s', v_entry.resolution);
    END IF;

    IF resolve_correction.node_id IS NOT NULL THEN
        SELECT n.* INTO v_node
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id AND n.id = resolve_correction.node_id
        FOR KEY SHARE;
        IF NOT FOUND OR v_node.lifecycle_state = 'archived' THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
        END IF;
        v_outcome := prme._add_outcome(
            v_user_id, v_node.id, 'explicit_correction', NULL, NULL, v_entry.thread_id, v_entry.message, NULL,
            'resolve_correction', v_node.version, now()
        );
        v_entry.resolution := 'linked';
        v_entry.resolved_node_id := v_node.id;
        v_entry.outcome_id := v_outcome.id;
    ELSE
        v_entry.resolution := 'dismissed';
    END IF;
    v_entry.resolved_at := now();

    UPDATE prme.correction_inbox AS i SET
        resolution = v_entry.resolution,
        resolved_node_id = v_entry.resolved_node_id,
        outcome_id = v_entry.outcome_id,
        resolved_at = v_entry.resolved_at
    WHERE i.user_id = v_user_id AND i.id = v_entry.id;
    RETURN v_entry;
END;
$$;

COMMENT ON FUNCTION prme.resolve_correction(text, uuid, uuid) IS
'Resolves a correction inbox entry of user_id: with node_id, appends the explicit_correction outcome to that '
'memory (any non-archived memory of the owner, else PR404) and marks the entry linked; without, dismisses it. '
'Repeating the same resolution returns the entry unchanged; a different one raises PR409.';

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;
GRANT EXECUTE ON FUNCTION prme.is_correction(text) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.link_correction(text, text, uuid[], text) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.list_correction_inbox(text, boolean, integer) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.resolve_correction(text, uuid, uuid) TO prme_app;
ALTER TABLE prme.correction_inbox ENABLE ROW LEVEL SECURITY;

-- >>> sql/postgres/230_maintenance_settings.sql

-- =============================================================================
-- prme-pg: maintenance settings (review cadences and decay per cycle)
--
-- How often a memory of each stability should be reviewed, and how much
-- confidence it loses per review cycle it stays overdue:
--   low           every  7 days, -0.15 per overdue cycle
--   semi-stable   every 30 days, -0.15
--   stable        every 90 days, -0.05
-- The table is keyed by owner like every other table (so it distributes and
-- colocates by user_id): the rows of the reserved owner '*' are the defaults, and
-- an owner's own row for a stability overrides them. Owners set overrides with
-- prme.set_maintenance_setting; the defaults are changed by the database owner
-- (UPDATE ... WHERE user_id = '*'), never through the API.
-- Cadences are elapsed time in whole seconds (days of 24 hours, no months), so
-- due dates do not depend on the session's TimeZone and cycle counts are exact.
-- =============================================================================

CREATE TABLE prme.maintenance_settings (
    user_id text NOT NULL,
    stability text NOT NULL CHECK (stability IN ('low', 'semi-stable', 'stable')),
    review_cadence interval NOT NULL CHECK (
        review_cadence >= interval '1 hour' AND review_cadence <= interval '3650 days'
        AND date_part('month', review_cadence) = 0 AND date_part('year', review_cadence) = 0
        AND date_trunc('second', review_cadence) = review_cadence
    ),
    decay_per_cycle numeric(5, 4) NOT NULL CHECK (decay_per_cycle BETWEEN 0 AND 1),
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (user_id, stability)
);

COMMENT ON TABLE prme.maintenance_settings IS
'Review cadence and decay per overdue cycle for each stability. Rows of user_id ''*'' are the defaults; an owner''s '
'row overrides the default for that stability. See docs/MAINTENANCE.md.';

INSERT INTO prme.maintenance_settings (user_id, stability, review_cadence, decay_per_cycle) VALUES
('*', 'low', interval '7 days', 0.15),
('*', 'semi-stable', interval '30 days', 0.15),
('*', 'stable', interval '90 days', 0.05);

CREATE FUNCTION prme._maintenance_setting(user_id text, stability text)
RETURNS prme.maintenance_settings
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_setting prme.maintenance_settings;
BEGIN
    SELECT s.* INTO v_setting
    FROM prme.maintenance_settings AS s
    WHERE s.user_id IN (_maintenance_setting.user_id, '*') AND s.stability = _maintenance_setting.stability
    ORDER BY s.user_id = '*'
    LIMIT 1;
    RETURN v_setting;
END;
$$;

COMMENT ON FUNCTION prme._maintenance_setting(text, text) IS
'Internal: the effective setting of user_id for a stability: the owner''s row, else the default (''*'') row.';

-- SQL-standard body, no SET clause: bound to its objects when created and inlined
-- into the calling query (the maintenance report calls it once per memory).
CREATE FUNCTION prme._plus_cadence(t timestamptz, cadence interval)
RETURNS timestamptz
LANGUAGE sql
STABLE
PARALLEL SAFE
RETURN t + interval '1 second' * pg_catalog.date_part('epoch', cadence);

COMMENT ON FUNCTION prme._plus_cadence(timestamptz, interval) IS
'Internal: t plus a cadence as elapsed time (a day is 86400 seconds whatever the TimeZone).';

-- What the settings functions return: one row per stability.
CREATE TYPE prme.maintenance_setting_view AS (
    stability text,
    review_cadence interval,
    decay_per_cycle numeric,
    source text
);

COMMENT ON TYPE prme.maintenance_setting_view IS
'An effective maintenance setting: stability, review_cadence, decay_per_cycle, and source (owner or default).';

CREATE FUNCTION prme.get_maintenance_settings(user_id text)
RETURNS SETOF prme.maintenance_setting_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(get_maintenance_settings.user_id);
BEGIN
    RETURN QUERY
    SELECT DISTINCT ON (s.stability)
        s.stability,
        s.review_cadence,
        s.decay_per_cycle::numeric,
        CASE WHEN s.user_id = '*' THEN 'default' ELSE 'owner' END
    FROM prme.maintenance_settings AS s
    WHERE s.user_id IN (v_user_id, '*')
    ORDER BY s.stability, s.user_id = '*';
END;
$$;

COMMENT ON FUNCTION prme.get_maintenance_settings(text) IS
'The effective review cadence and decay per overdue cycle of user_id for each stability, and whether each comes '
'from the owner''s override or the default.';

CREATE FUNCTION prme.set_maintenance_setting(
    user_id text,
    stability text,
    review_cadence interval,
    decay_per_cycle numeric
)
RETURNS SETOF prme.maintenance_setting_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(set_maintenance_setting.user_id);
    v_decay numeric := prme._valid_fraction('decay_per_cycle', set_maintenance_setting.decay_per_cycle);
BEGIN
    IF v_user_id = '*' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'user_id ''*'' names the defaults, which only the database owner changes';
    END IF;
    IF set_maintenance_setting.stability IS NULL
       OR set_maintenance_setting.stability NOT IN ('low', 'semi-stable', 'stable') THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'stability must be low, semi-stable or stable';
    END IF;
    IF set_maintenance_setting.review_cadence IS NULL
       OR NOT (set_maintenance_setting.review_cadence >= interval '1 hour'
               AND set_maintenance_setting.review_cadence <= interval '3650 days')
       OR date_part('month', set_maintenance_setting.review_cadence) <> 0
       OR date_part('year', set_maintenance_setting.review_cadence) <> 0
       OR date_trunc('second', set_maintenance_setting.review_cadence) <> set_maintenance_setting.review_cadence THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'review_cadence must be between 1 hour and 3650 days, in whole days, hours, minutes or seconds',
            DETAIL = format('got %s', coalesce(set_maintenance_setting.review_cadence::text, 'NULL'));
    END IF;

    INSERT INTO prme.maintenance_settings AS s (user_id, stability, review_cadence, decay_per_cycle, updated_at)
    VALUES (v_user_id, set_maintenance_setting.stability, set_maintenance_setting.review_cadence, v_decay, now())
    ON CONFLICT (user_id, stability) DO UPDATE SET
        review_cadence = excluded.review_cadence,
        decay_per_cycle = excluded.decay_per_cycle,
        updated_at = excluded.updated_at;

    RETURN QUERY SELECT * FROM prme.get_maintenance_settings(v_user_id);
END;
$$;

COMMENT ON FUNCTION prme.set_maintenance_setting(text, text, interval, numeric) IS
'Sets user_id''s own review cadence and decay per overdue cycle for one stability (overriding the default) and '
'returns the effective settings. Cadence: 1 hour to 3650 days, no months; decay: [0, 1], 4 decimals. PR422 '
'otherwise, and for user_id ''*'' (the defaults).';

CREATE FUNCTION prme.reset_maintenance_settings(user_id text)
RETURNS SETOF prme.maintenance_setting_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(reset_maintenance_settings.user_id);
BEGIN
    IF v_user_id = '*' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'user_id ''*'' names the defaults, which only the database owner changes';
    END IF;
    DELETE FROM prme.maintenance_settings AS s WHERE s.user_id = v_user_id;
    RETURN QUERY SELECT * FROM prme.get_maintenance_settings(v_user_id);
END;
$$;

COMMENT ON FUNCTION prme.reset_maintenance_settings(text) IS
'Removes user_id''s overrides, so the defaults apply again, and returns the effective settings.';

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;
GRANT EXECUTE ON FUNCTION prme.get_maintenance_settings(text) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.set_maintenance_setting(text, text, interval, numeric) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.reset_maintenance_settings(text) TO prme_app;
ALTER TABLE prme.maintenance_settings ENABLE ROW LEVEL SECURITY;

-- >>> sql/postgres/240_reviews_and_decay.sql

-- =============================================================================
-- prme-pg: reviews and decay bookkeeping
--
-- A memory is due for review once its next_review_at has passed; a memory without
-- next_review_at has no review schedule and is never due. A review
-- (prme.mark_reviewed, or a stability change applied from a maintenance patch)
-- sets next_review_at one cadence (of its stability) ahead, and settles the
-- outcomes seen so far: the maintenance report counts only outcomes recorded
-- since the last review, so a correction that was dealt with does not lower a
-- memory again at every run.
--
-- Overdue cycles: the first begins at next_review_at, one more at each further
-- full cadence. Decay (applied from patches, 260) is idempotent per cycle:
-- prme.node_maintenance remembers how many cycles were decayed against which
-- next_review_at (decay_anchor). A review moves next_review_at, so the count
-- starts again from zero.
-- =============================================================================

CREATE FUNCTION prme._cycles_due(due_at timestamptz, as_of timestamptz, cadence_seconds double precision)
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
-- SQL-standard body, no SET clause: bound to its objects when created and inlined
-- into maintenance_report's one query (each argument appears once, so even an
-- expression argument is inlined). as_of - due_at is exact (integer microseconds)
-- and cadences are whole seconds, so floor() is exact at every cycle boundary for
-- spans within a century.
RETURN greatest(0, floor(date_part('epoch', as_of - due_at) / cadence_seconds) + 1)::integer;

COMMENT ON FUNCTION prme._cycles_due(timestamptz, timestamptz, double precision) IS
'Internal: overdue review cycles begun by as_of for a memory due at due_at (its next_review_at): 0 before, 1 from '
'due_at on, and one more for each further full cadence (cadence_seconds); 0 when due_at is null.';

CREATE FUNCTION prme._settle_outcomes(
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
        updated_at = _settle_outcomes.reviewed_at
    WHERE k.user_id = _settle_outcomes.user_id AND k.node_id = _settle_outcomes.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'prme.node_maintenance has no row for node %', _settle_outcomes.node_id
            USING HINT = 'the nodes_maintenance_mirror trigger keeps one per node; rebuild with prme._rebuild_node_maintenance';
    END IF;
END;
$$;

COMMENT ON FUNCTION prme._settle_outcomes(text, uuid, bigint, bigint, bigint, bigint, timestamptz) IS
'Internal: records that a review of the memory saw these cumulative outcome counts; the report then counts only '
'outcomes beyond them. Idempotent (counts are raised, never lowered).';

CREATE FUNCTION prme.mark_reviewed(user_id text, node_id uuid, next_review_at timestamptz DEFAULT NULL)
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
    v_summary prme.node_maintenance;
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

    UPDATE prme.nodes AS n SET
        next_review_at = v_after.next_review_at,
        updated_at = v_after.updated_at,
        version = v_after.version,
        last_checksum = v_after.last_checksum
    WHERE n.user_id = v_user_id AND n.id = mark_reviewed.node_id;
    INSERT INTO prme.journal SELECT v_entry.*;

    -- The review covers every outcome recorded so far (recorders hold a share lock
    -- on the node, so all of them have committed by the time we hold ours).
    SELECT s.* INTO v_summary
    FROM prme.node_maintenance AS s
    WHERE s.user_id = v_user_id AND s.node_id = mark_reviewed.node_id;
    PERFORM prme._settle_outcomes(
        v_user_id, mark_reviewed.node_id, coalesce(v_summary.explicit_reinforcements, 0),
        coalesce(v_summary.implicit_successes, 0), coalesce(v_summary.neutral_exposures, 0),
        coalesce(v_summary.explicit_corrections, 0), v_now
    );

    RETURN prme._node_view(v_after, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.mark_reviewed(text, uuid, timestamptz) IS
'Records that the owner reviewed a memory of user_id: next_review_at becomes the given future time, else now plus '
'the review cadence of its stability (this resets decay), and every outcome so far counts as seen by the review. '
'Journaled as op review. PR404 for a missing, foreign or archived node.';

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;
GRANT EXECUTE ON FUNCTION prme.mark_reviewed(text, uuid, timestamptz) TO prme_app;

-- >>> sql/postgres/250_maintenance_report.sql

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

-- >>> sql/postgres/260_patches.sql

-- =============================================================================
-- prme-pg: maintenance patches (proposed changes, reviewed, applied once)
--
-- maintenance_patch stores the actionable rows of maintenance_report as a patch
-- of numbered ops (op_001, op_002, ...), set-based:
--   op                 from recommendation      risk    requires_review  default_selected
--   decay_confidence   decay_confidence         low     no               yes
--   update_stability   increase_stability       low     no               yes
--   update_stability   decrease_stability       medium  yes              yes
--   update_stability   flag_for_review          medium  yes              no
--   mark_contested     mark_contested           high    yes              no
-- Each op records exactly the change that was reviewed (field from -> to), and
-- apply_patch applies it only while the memory still shows the "from" values;
-- otherwise the op is stale and nothing changes (a later patch proposes afresh).
-- manual mode applies exactly the selected ops; auto mode applies decay ops and
-- stability increases that need no review, never a decrease or mark_contested.
-- Each op applies at most once: apply_patch locks the op rows (FOR UPDATE, in op
-- order) and an applied op records applied_at and the journal record it wrote.
-- Every applied op is one journaled node mutation (policy maintenance_v1), whose
-- operation_id is the op's operation_id.
-- =============================================================================

CREATE TABLE prme.maintenance_patches (
    user_id text NOT NULL,
    id uuid NOT NULL,
    as_of timestamptz NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, id)
);

COMMENT ON TABLE prme.maintenance_patches IS
'Proposed maintenance patches: when each was computed (as_of) and created. Its ops are in prme.patch_ops.';

CREATE TABLE prme.patch_ops (
    user_id text NOT NULL,
    patch_id uuid NOT NULL,
    op_no integer NOT NULL CHECK (op_no > 0),
    op_id text NOT NULL CHECK (op_id ~ '^op_[0-9]{3,}$'),
    op text NOT NULL CHECK (op IN ('update_stability', 'decay_confidence', 'mark_contested')),
    recommendation text NOT NULL CHECK (recommendation IN (
        'decay_confidence', 'increase_stability', 'decrease_stability', 'flag_for_review', 'mark_contested'
    )),
    node_id uuid NOT NULL,
    node_version bigint NOT NULL CHECK (node_version > 0),
    reason text NOT NULL,
    risk text NOT NULL CHECK (risk IN ('low', 'medium', 'high')),
    requires_review boolean NOT NULL,
    default_selected boolean NOT NULL,
    stability_from text,
    stability_to text,
    confidence_from numeric(5, 4),
    confidence_to numeric(5, 4),
    lifecycle_from text,
    lifecycle_to text,
    decay_anchor timestamptz,
    decay_cycles_from integer,
    decay_cycles_to integer,
    seen_explicit_reinforcements bigint NOT NULL,
    seen_implicit_successes bigint NOT NULL,
    seen_neutral_exposures bigint NOT NULL,
    seen_explicit_corrections bigint NOT NULL,
    operation_id uuid NOT NULL,
    applied_at timestamptz,
    applied_mode text CHECK (applied_mode IN ('manual', 'auto')),
    applied_version bigint,
    PRIMARY KEY (user_id, patch_id, op_no),
    UNIQUE (user_id, patch_id, op_id),
    FOREIGN KEY (user_id, patch_id) REFERENCES prme.maintenance_patches (user_id, id),
    FOREIGN KEY (user_id, node_id) REFERENCES prme.nodes (user_id, id),
    CHECK ((applied_at IS NULL) = (applied_mode IS NULL) AND (applied_at IS NULL) = (applied_version IS NULL)),
    CHECK (op <> 'update_stability' OR (stability_from IS NOT NULL AND stability_to IS NOT NULL)),
    CHECK (op <> 'mark_contested' OR (lifecycle_from IS NOT NULL AND lifecycle_to IS NOT NULL)),
    CHECK (op <> 'decay_confidence' OR (
        confidence_from IS NOT NULL AND confidence_to IS NOT NULL AND decay_anchor IS NOT NULL
        AND decay_cycles_from IS NOT NULL AND decay_cycles_to > decay_cycles_from
    ))
);

COMMENT ON TABLE prme.patch_ops IS
'The ops of maintenance patches: what each changes (from -> to), why, its risk, whether it needs review, the '
'outcome counts the proposal saw, and when (and in which mode) it was applied. Each op applies at most once.';
COMMENT ON COLUMN prme.patch_ops.operation_id IS
'The operation_id of the journal record the op writes when applied.';
COMMENT ON COLUMN prme.patch_ops.applied_version IS
'The node version (journal record) the op produced when it was applied.';

-- What maintenance_patch and get_patch return.
CREATE TYPE prme.patch_view AS (
    patch_id uuid,
    created_at timestamptz,
    as_of timestamptz,
    ops jsonb
);

COMMENT ON TYPE prme.patch_view IS
'A maintenance patch: patch_id, created_at, as_of and its ops as a JSON array.';

CREATE FUNCTION prme._patch_document(user_id text, patch_id uuid)
RETURNS prme.patch_view
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_patch prme.patch_view;
BEGIN
    SELECT
        p.id,
        p.created_at,
        p.as_of,
        coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'op_id', o.op_id,
                'op', o.op,
                'recommendation', o.recommendation,
                'target', jsonb_build_object(
                    'node_id', o.node_id, 'version', o.node_version, 'content', left(n.content, 200)
                ),
                'updates', CASE o.op
                    WHEN 'update_stability' THEN jsonb_build_object(
                        'stability', jsonb_build_object('from', o.stability_from, 'to', o.stability_to)
                    )
                    WHEN 'decay_confidence' THEN jsonb_build_object(
                        'confidence_base', jsonb_build_object(
                            'from', trim_scale(o.confidence_from), 'to', trim_scale(o.confidence_to)
                        ),
                        'decay_cycles', jsonb_build_object('from', o.decay_cycles_from, 'to', o.decay_cycles_to)
                    )
                    ELSE jsonb_build_object(
                        'lifecycle_state', jsonb_build_object('from', o.lifecycle_from, 'to', o.lifecycle_to)
                    )
                END,
                'reason', o.reason,
                'risk', o.risk,
                'requires_review', o.requires_review,
                'default_selected', o.default_selected,
                'status', CASE WHEN o.applied_at IS NULL THEN 'pending' ELSE 'applied' END,
                'applied_at', o.applied_at,
                'applied_mode', o.applied_mode
            ) ORDER BY o.op_no)
            FROM prme.patch_ops AS o
            INNER JOIN prme.nodes AS n ON n.user_id = o.user_id AND n.id = o.node_id
            WHERE o.user_id = p.user_id AND o.patch_id = p.id
        ), '[]'::jsonb)
    INTO v_patch
    FROM prme.maintenance_patches AS p
    WHERE p.user_id = _patch_document.user_id AND p.id = _patch_document.patch_id;
    RETURN v_patch;
END;
$$;

COMMENT ON FUNCTION prme._patch_document(text, uuid) IS
'Internal: a stored patch as maintenance_patch and get_patch return it (NULL when there is none): patch_id, '
'created_at, as_of and the ops '
'as a JSON array (op_id, op, recommendation, target, updates, reason, risk, requires_review, default_selected, '
'status, applied_at, applied_mode).';

CREATE FUNCTION prme.maintenance_patch(user_id text, as_of timestamptz DEFAULT NULL)
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
            m.reviewed_explicit_reinforcements,
            m.reviewed_implicit_successes,
            m.neutral_exposures,
            m.reviewed_explicit_corrections,
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
        INNER JOIN prme.node_maintenance AS m ON m.user_id = v_user_id AND m.node_id = r.node_id
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

CREATE FUNCTION prme.get_patch(user_id text, patch_id uuid)
RETURNS prme.patch_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(get_patch.user_id);
    v_patch prme.patch_view;
BEGIN
    IF get_patch.patch_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'patch_id must not be null';
    END IF;
    v_patch := prme._patch_document(v_user_id, get_patch.patch_id);
    IF v_patch.patch_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'patch not found';
    END IF;
    RETURN v_patch;
END;
$$;

COMMENT ON FUNCTION prme.get_patch(text, uuid) IS
'A stored maintenance patch of user_id with the status of each op (pending or applied, when and how). '
'PR404 when it is missing or another owner''s.';

CREATE FUNCTION prme._apply_patch_op(
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
    v_state prme.node_maintenance;
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
            SELECT k.* INTO v_state
            FROM prme.node_maintenance AS k
            WHERE k.user_id = op.user_id AND k.node_id = op.node_id;
            v_done := CASE WHEN v_state.decay_anchor = v_node.next_review_at THEN v_state.decay_cycles ELSE 0 END;
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
    UPDATE prme.nodes AS n SET
        confidence_base = v_after.confidence_base,
        stability = v_after.stability,
        next_review_at = v_after.next_review_at,
        lifecycle_state = v_after.lifecycle_state,
        updated_at = v_after.updated_at,
        version = v_after.version,
        last_checksum = v_after.last_checksum
    WHERE n.user_id = op.user_id AND n.id = op.node_id;
    INSERT INTO prme.journal SELECT v_entry.*;

    IF op.op = 'decay_confidence' THEN
        UPDATE prme.node_maintenance AS k SET
            decay_anchor = op.decay_anchor,
            decay_cycles = op.decay_cycles_to,
            updated_at = v_now
        WHERE k.user_id = op.user_id AND k.node_id = op.node_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'prme.node_maintenance has no row for node %', op.node_id
                USING HINT = 'the nodes_maintenance_mirror trigger keeps one per node; rebuild with prme._rebuild_node_maintenance';
        END IF;
    ELSE
        -- Stability changes and mark_contested are reviewed decisions: the
        -- outcomes the proposal saw are settled.
        PERFORM prme._settle_outcomes(
            op.user_id, op.node_id, op.seen_explicit_reinforcements, op.seen_implicit_successes,
            op.seen_neutral_exposures, op.seen_explicit_corrections, v_now
        );
    END IF;

    status := 'applied';
    node_version := v_after.version;
END;
$$;

COMMENT ON FUNCTION prme._apply_patch_op(prme.patch_ops) IS
'Internal: applies one patch op under the memory''s row lock if the memory still shows what the op expects '
'(else status stale, with the reason in detail), journaled as op decay_confidence, update_stability or '
'mark_contested with policy maintenance_v1. The caller holds the op row lock and records the application.';

CREATE FUNCTION prme.apply_patch(
    user_id text,
    patch_id uuid,
    op_ids text[] DEFAULT NULL,
    mode text DEFAULT 'manual'
)
RETURNS TABLE (op_id text, op text, node_id uuid, status text, detail text, node_version bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(apply_patch.user_id);
    v_ids text[];
    v_missing text[];
    v_op prme.patch_ops;
    v_result record;
BEGIN
    IF apply_patch.patch_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'patch_id must not be null';
    END IF;
    IF apply_patch.mode IS NULL OR apply_patch.mode NOT IN ('manual', 'auto') THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'mode must be manual or auto';
    END IF;
    IF apply_patch.mode = 'manual' THEN
        IF apply_patch.op_ids IS NULL OR array_position(apply_patch.op_ids, NULL) IS NOT NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422', MESSAGE = 'manual mode applies the selected ops: op_ids must list them';
        END IF;
        v_ids := ARRAY(SELECT DISTINCT x.id FROM unnest(apply_patch.op_ids) AS x (id));
    ELSIF apply_patch.op_ids IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'auto mode chooses its ops: op_ids must be null';
    END IF;

    PERFORM FROM prme.maintenance_patches AS p WHERE p.user_id = v_user_id AND p.id = apply_patch.patch_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'patch not found';
    END IF;
    IF apply_patch.mode = 'manual' THEN
        v_missing := ARRAY(
            SELECT x.id FROM unnest(v_ids) AS x (id)
            WHERE NOT EXISTS (
                SELECT FROM prme.patch_ops AS o
                WHERE o.user_id = v_user_id AND o.patch_id = apply_patch.patch_id AND o.op_id = x.id
            )
            ORDER BY x.id
        );
        IF cardinality(v_missing) > 0 THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR404', MESSAGE = 'operation not found in this patch',
                DETAIL = format('unknown op_ids: %s', array_to_string(v_missing, ', '));
        END IF;
    END IF;

    -- Lock the chosen ops in op order (which is memory order, so concurrent applies
    -- of overlapping patches lock memories in the same order). A second apply of
    -- the same ops waits here and then sees them applied.
    FOR v_op IN
        SELECT o.*
        FROM prme.patch_ops AS o
        WHERE o.user_id = v_user_id
          AND o.patch_id = apply_patch.patch_id
          AND CASE
              WHEN apply_patch.mode = 'manual' THEN o.op_id = ANY(v_ids)
              ELSE o.op = 'decay_confidence' OR (o.recommendation = 'increase_stability' AND NOT o.requires_review)
          END
        ORDER BY o.op_no
        FOR UPDATE
    LOOP
        op_id := v_op.op_id;
        op := v_op.op;
        node_id := v_op.node_id;
        IF v_op.applied_at IS NOT NULL THEN
            status := 'already_applied';
            detail := format('applied at %s in %s mode', v_op.applied_at, v_op.applied_mode);
            node_version := v_op.applied_version;
        ELSE
            v_result := prme._apply_patch_op(v_op);
            status := v_result.status;
            detail := v_result.detail;
            node_version := v_result.node_version;
            IF v_result.status = 'applied' THEN
                UPDATE prme.patch_ops AS o SET
                    applied_at = now(),
                    applied_mode = apply_patch.mode,
                    applied_version = v_result.node_version
                WHERE o.user_id = v_user_id AND o.patch_id = v_op.patch_id AND o.op_no = v_op.op_no;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION prme.apply_patch(text, uuid, text[], text) IS
'Applies ops of a maintenance patch of user_id. manual: exactly the ops listed in op_ids (PR404 if one is not in '
'the patch); auto (op_ids null): decay ops and stability increases that need no review, never a decrease or '
'mark_contested. One row per op considered: status applied, already_applied or stale (the memory changed since '
'the proposal; nothing written). Each op applies at most once, also under concurrent calls.';

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;
GRANT EXECUTE ON FUNCTION prme.maintenance_patch(text, timestamptz) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.get_patch(text, uuid) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.apply_patch(text, uuid, text[], text) TO prme_app;
ALTER TABLE prme.maintenance_patches ENABLE ROW LEVEL SECURITY;
ALTER TABLE prme.patch_ops ENABLE ROW LEVEL SECURITY;

-- >>> sql/postgres/110_reinforce.sql: prme.reinforce appends an explicit_reinforcement outcome
-- (CREATE OR REPLACE keeps its comment and grants)

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
    v_now timestamptz := now();
BEGIN
    IF reinforce.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;

    -- 2. Replay check before any lock: a plain read, no WAL.
    IF reinforce.request_id IS NOT NULL THEN
        SELECT n.* INTO v_node
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id AND n.id = reinforce.node_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
        END IF;
        IF prme._key_replays(
            v_user_id, v_node.namespace, reinforce.request_id, 'reinforce', reinforce.node_id, reinforce.evidence_id
        ) THEN
            -- Read the node again: the call that committed the key may have committed
            -- after the read above, and a replay returns the current node. Seeing the
            -- key guarantees this new snapshot sees that call's update too.
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

    -- Re-check the key under the row lock: a call with this key on this node that
    -- committed while we waited for the lock is visible to this new statement.
    IF reinforce.request_id IS NOT NULL AND prme._key_replays(
        v_user_id, v_node.namespace, reinforce.request_id, 'reinforce', reinforce.node_id, reinforce.evidence_id
    ) THEN
        RETURN prme._node_view(v_node, TRUE);
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

    -- 6. Journal record, chained to the node's previous record.
    v_entry := prme._journal_entry(
        'reinforce', 'additive_caps_v1', gen_random_uuid(), reinforce.request_id, reinforce.evidence_id,
        v_node, v_after
    );
    v_after.last_checksum := v_entry.checksum;

    UPDATE prme.nodes AS n SET
        reinforcement_boost = v_after.reinforcement_boost,
        confidence_base = v_after.confidence_base,
        last_reinforced_at = v_after.last_reinforced_at,
        updated_at = v_after.updated_at,
        evidence_refs = v_after.evidence_refs,
        version = v_after.version,
        last_checksum = v_after.last_checksum
    WHERE n.user_id = v_user_id AND n.id = reinforce.node_id;
    INSERT INTO prme.journal SELECT v_entry.*;

    -- Claim the key last, once the journal record it names exists. Calls on this
    -- node are serialised by the row lock, so a conflict here can only be a
    -- concurrent call that bound this key to another node of the namespace:
    -- PR409, which also undoes this call's update and record.
    IF reinforce.request_id IS NOT NULL THEN
        INSERT INTO prme.request_keys (
            user_id, namespace, request_id, operation, node_id, evidence_id, node_version, created_at
        ) VALUES (
            v_user_id, v_node.namespace, reinforce.request_id, 'reinforce', reinforce.node_id,
            reinforce.evidence_id, v_after.version, v_now
        )
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR409',
                MESSAGE = 'request_id was already used for another request',
                DETAIL = 'an idempotency key is bound to one operation, node and evidence';
        END IF;
    END IF;

    -- 7. The outcome event (docs/MAINTENANCE.md): an applied confirmation counts
    -- as explicit_reinforcement; a replay returned above and appends nothing.
    PERFORM prme._add_outcome(
        v_user_id, reinforce.node_id, 'explicit_reinforcement', reinforce.evidence_id, NULL, NULL, NULL,
        reinforce.request_id, 'reinforce', v_after.version, v_now
    );

    RETURN prme._node_view(v_after, FALSE);
END;
$$;
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (3, 'outcomes_and_maintenance', '1133acc6de37e73473d07b3a51119d9bd30b96d13cd6bbc8bc478321b7ff08b6');

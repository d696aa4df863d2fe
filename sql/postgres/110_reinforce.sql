-- =============================================================================
-- prme-pg: reinforce (explicit confirmation of a memory)
--
-- The reference semantics are docs/DESIGN.md section 3; in short:
--   1. validate; 2. under the key's advisory lock, a committed key for this same
--   node and evidence is a replay: return the current node, write nothing, take no
--   row lock; a key bound to anything else is PR409; 3. lock the node (missing,
--   foreign or archived is PR404);
--   4. evidence must share the node's owner and scope; 5. additive caps that never
--   reduce; 6. one journal record, which carries the key (request_id, unique per
--   user_id and namespace); 7. that record is the explicit_reinforcement outcome,
--   counted by nodes.reinforcements in the node's own UPDATE. A fresh confirmation
--   writes the node row and its journal record, nothing else.
-- =============================================================================

-- SQL-standard bodies, no SET clause: inlined (040_nodes.sql, _json_time).
CREATE FUNCTION prme._reinforced_boost(boost numeric)
RETURNS numeric
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
-- +0.15 up to a cap of 0.5; a value already above the cap is kept, never reduced.
RETURN greatest(boost, least(boost + 0.15, 0.5));

COMMENT ON FUNCTION prme._reinforced_boost(numeric) IS
'Internal, policy additive_caps_v1: reinforcement_boost after one confirmation, greatest(b, least(b + 0.15, 0.5)).';

CREATE FUNCTION prme._reinforced_confidence(confidence numeric)
RETURNS numeric
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
-- +0.05 up to a cap of 0.95; a value already above the cap is kept, never reduced.
RETURN greatest(confidence, least(confidence + 0.05, 0.95));

COMMENT ON FUNCTION prme._reinforced_confidence(numeric) IS
'Internal, policy additive_caps_v1: confidence_base after one confirmation, greatest(c, least(c + 0.05, 0.95)).';

CREATE FUNCTION prme.reinforce(
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

REVOKE ALL ON FUNCTION prme.reinforce(uuid, text, uuid, uuid) FROM public;
GRANT EXECUTE ON FUNCTION prme.reinforce(uuid, text, uuid, uuid) TO prme_app;

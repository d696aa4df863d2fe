-- =============================================================================
-- prme-pg: reinforce (explicit confirmation of a memory)
--
-- The reference semantics are docs/DESIGN.md section 3; in short:
--   1. validate; 2. take the key's advisory lock; 3. read the node as it is, and
--   only if it can be confirmed (there, not archived, key unused, evidence of its
--   owner and scope); otherwise say why: a key bound to this same node and evidence
--   is a replay (the current node, nothing written, no row lock), bound to anything
--   else PR409; a missing, foreign or archived node or foreign evidence PR404;
--   4. additive caps that never reduce; 5. one statement writes the node row, if it
--   is still the version read, and its journal record, which carries the key
--   (request_id, unique per user_id and namespace) and is the confirmation's
--   explicit_reinforcement outcome, counted by nodes.reinforcements in the same
--   UPDATE. A fresh confirmation writes the node row and its journal record,
--   nothing else, in two statements (docs/REINFORCE.md, "Hot path").
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
    v_now timestamptz := now();
BEGIN
    IF reinforce.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;

    -- 2. The key's advisory lock (memory only, no WAL) before anything is read. Every
    -- call that claims a key holds it until it commits, so the key's state seen by
    -- any read below stays its state until this call commits.
    IF reinforce.request_id IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(prme._key_lock(v_user_id, reinforce.request_id));
    END IF;

    LOOP
        -- 3. The node as it is, if it can be confirmed: a plain read, no row lock.
        SELECT n.* INTO v_node
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id AND n.id = reinforce.node_id
          AND n.lifecycle_state <> 'archived'
          -- The key unused, in both places a key lives (070_request_keys.sql;
          -- prme._is_replay gives the verdict when it is used).
          AND (reinforce.request_id IS NULL OR NOT EXISTS (
              SELECT FROM prme.journal AS j
              WHERE j.user_id = n.user_id AND j.key_namespace = n.namespace AND j.request_id = reinforce.request_id
          ) AND NOT EXISTS (
              SELECT FROM prme.request_keys AS k
              WHERE k.user_id = n.user_id AND k.namespace = n.namespace AND k.request_id = reinforce.request_id
          ))
          AND (reinforce.evidence_id IS NULL OR EXISTS (
              SELECT FROM prme.events AS e
              WHERE e.user_id = n.user_id AND e.id = reinforce.evidence_id AND e.scope = n.scope
          ));
        IF NOT FOUND THEN
            -- Why not, read again. A replay returns the node as this read sees it:
            -- the call that claimed the key committed its update before the key.
            SELECT n.* INTO v_node
            FROM prme.nodes AS n
            WHERE n.user_id = v_user_id AND n.id = reinforce.node_id;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
            END IF;
            IF reinforce.request_id IS NOT NULL AND prme._is_replay(
                v_user_id, v_node.namespace, reinforce.request_id, 'reinforce', reinforce.node_id,
                reinforce.evidence_id
            ) THEN
                RETURN prme._node_view(v_node, TRUE);
            END IF;
            IF v_node.lifecycle_state = 'archived' THEN
                RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
            END IF;
            IF reinforce.evidence_id IS NOT NULL THEN
                PERFORM FROM prme.events AS e
                WHERE e.user_id = v_user_id AND e.id = reinforce.evidence_id AND e.scope = v_node.scope;
                IF NOT FOUND THEN
                    RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'evidence not found';
                END IF;
            END IF;
            CONTINUE;  -- it changed between the two reads: read it again
        END IF;

        -- 4. Additive caps; salience_base is unchanged.
        v_after := v_node;
        v_after.reinforcement_boost := prme._reinforced_boost(v_node.reinforcement_boost);
        v_after.confidence_base := prme._reinforced_confidence(v_node.confidence_base);
        v_after.last_reinforced_at := v_now;
        v_after.updated_at := v_now;
        IF reinforce.evidence_id IS NOT NULL THEN
            v_after.evidence_refs := v_node.evidence_refs || reinforce.evidence_id;
        END IF;
        v_after.version := v_node.version + 1;

        -- 5. The journal record, chained to the node's previous record; it carries the key.
        v_entry := prme._journal_entry(
            'reinforce', 'additive_caps_v1', gen_random_uuid(), reinforce.request_id, reinforce.evidence_id,
            v_node, v_after
        );

        -- Both writes in one statement, only if the node is still the version read
        -- (an UPDATE waits for a concurrent writer's commit and then sees its
        -- version). The UPDATE is HOT: no column it sets is indexed, no generated
        -- column, no trigger; the domains of the columns it sets are all it checks.
        -- The record claims the key (journal_request_key); no API call can have
        -- claimed it since the read above (they wait for its advisory lock).
        -- The explicit_reinforcement outcome is the record, counted on the node by
        -- the same UPDATE (docs/MAINTENANCE.md).
        WITH updated AS (
            UPDATE prme.nodes AS n SET
                reinforcement_boost = v_after.reinforcement_boost,
                confidence_base = v_after.confidence_base,
                last_reinforced_at = v_after.last_reinforced_at,
                updated_at = v_after.updated_at,
                evidence_refs = v_after.evidence_refs,
                version = v_after.version,
                last_checksum = v_entry.checksum,
                reinforcements = n.reinforcements + 1
            WHERE n.user_id = v_user_id AND n.id = reinforce.node_id AND n.version = v_node.version
            RETURNING n.reinforcements
        )
        INSERT INTO prme.journal
        SELECT v_entry.* FROM updated;
        EXIT WHEN FOUND;
        -- Another call changed the node since the read: start again from its new version.
    END LOOP;

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

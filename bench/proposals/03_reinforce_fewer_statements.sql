-- Proposal 3 (includes 2): prme.reinforce in five SQL statements instead of nine.
--
-- Before, a fresh confirmation with a request_id runs nine statements, each with
-- its own executor start-up (and, for the writes, its own build of the table's
-- CHECK constraints): read the node, read the key (_key_replays), lock the node,
-- read the key again (_key_replays), update the node, insert the journal row, claim
-- the key, then _add_outcome's two (insert the outcome, add it to the totals).
-- After:
--   (1) one read of the node joined to its key: the replay check, no lock, no WAL.
--       Node and key come from one snapshot, so a key that is visible comes with
--       its call's update of the node: a replay returns the current node without
--       reading it again;
--   (2) lock the node (a statement of its own, so that (3) runs with a snapshot
--       taken after any wait for the lock);
--   (3) one data-modifying CTE that claims the key and, only if the claim
--       succeeded, updates the node and appends the journal row;
--   (4, 5) _add_outcome, unchanged.
-- The record is computed from the locked row before (3), as before. If the claim
-- finds the key taken (ON CONFLICT waits for a concurrent holder to finish),
-- nothing is written, and _key_replays (a fresh snapshot) answers: a replay when
-- the key is bound to this node and evidence, PR409 otherwise. This replaces the
-- re-check after the lock; the outcome is the same in every interleaving (docs/DESIGN.md
-- section 3) and the bytes written are the same (bench/run.py --compare checks the
-- records; the pgTAP and race tests are the proof to run before adopting it).
\ir 02_helpers_inline_sql.sql

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
    v_seen record;
    v_claimed boolean;
BEGIN
    IF reinforce.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;

    -- 2. Replay check before any lock: one plain read of the node and its key, no WAL.
    IF reinforce.request_id IS NOT NULL THEN
        SELECT n AS node,
               k.request_id IS NOT NULL AS key_used,
               k.operation = 'reinforce' AND k.node_id = n.id
               AND k.evidence_id IS NOT DISTINCT FROM reinforce.evidence_id AS same_request
        INTO v_seen
        FROM prme.nodes AS n
        LEFT JOIN prme.request_keys AS k
            ON k.user_id = n.user_id AND k.namespace = n.namespace AND k.request_id = reinforce.request_id
        WHERE n.user_id = v_user_id AND n.id = reinforce.node_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
        END IF;
        IF v_seen.key_used THEN
            IF v_seen.same_request THEN
                RETURN prme._node_view(v_seen.node, TRUE);
            END IF;
            RAISE EXCEPTION USING
                ERRCODE = 'PR409',
                MESSAGE = 'request_id was already used for another request',
                DETAIL = 'an idempotency key is bound to one operation, node and evidence';
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

    -- 6. Journal record, chained to the node's previous record.
    v_entry := prme._journal_entry(
        'reinforce', 'additive_caps_v1', gen_random_uuid(), reinforce.request_id, reinforce.evidence_id,
        v_node, v_after
    );
    v_after.last_checksum := v_entry.checksum;

    -- 6. Claim the key (when given) and write, in one statement: the node, the record,
    -- and the key (after the record it names; the foreign key is checked at the end of
    -- the statement). Nothing is written when the claim fails.
    WITH claimed AS (
        INSERT INTO prme.request_keys (
            user_id, namespace, request_id, operation, node_id, evidence_id, node_version, created_at
        )
        SELECT v_user_id, v_node.namespace, reinforce.request_id, 'reinforce', reinforce.node_id,
               reinforce.evidence_id, v_after.version, v_now
        WHERE reinforce.request_id IS NOT NULL
        ON CONFLICT DO NOTHING
        RETURNING 1
    ), go AS (
        SELECT reinforce.request_id IS NULL OR EXISTS (SELECT FROM claimed) AS ok
    ), bumped AS (
        UPDATE prme.nodes AS n SET
            reinforcement_boost = v_after.reinforcement_boost,
            confidence_base = v_after.confidence_base,
            last_reinforced_at = v_after.last_reinforced_at,
            updated_at = v_after.updated_at,
            evidence_refs = v_after.evidence_refs,
            version = v_after.version,
            last_checksum = v_after.last_checksum
        FROM go
        WHERE go.ok AND n.user_id = v_user_id AND n.id = reinforce.node_id
    ), journaled AS (
        INSERT INTO prme.journal SELECT v_entry.* FROM go WHERE go.ok
    )
    SELECT go.ok INTO v_claimed FROM go;
    IF v_claimed THEN
        -- 7. The outcome event, as before.
        PERFORM prme._add_outcome(
            v_user_id, reinforce.node_id, 'explicit_reinforcement', reinforce.evidence_id, NULL, NULL, NULL,
            reinforce.request_id, 'reinforce', v_after.version, v_now
        );
        RETURN prme._node_view(v_after, FALSE);
    END IF;

    -- The key was taken meanwhile (committed while we waited): a replay of this
    -- same call, or PR409. _key_replays reads with a fresh snapshot.
    IF prme._key_replays(
        v_user_id, v_node.namespace, reinforce.request_id, 'reinforce', reinforce.node_id, reinforce.evidence_id
    ) THEN
        RETURN prme._node_view(v_node, TRUE);
    END IF;
    RAISE EXCEPTION USING
        ERRCODE = 'PR409',
        MESSAGE = 'request_id was already used for another request',
        DETAIL = 'an idempotency key is bound to one operation, node and evidence';
END;
$$;

-- c. The same writes as prme.reinforce, done the way a client would without the
-- function: one statement per step inside one transaction (6 round trips, 8 with outcomes).
-- The client locks and reads the row (it needs the before state for the record),
-- bumps the node, appends the journal record, claims the key (after the record:
-- its foreign key names it), appends the explicit_reinforcement outcome and
-- updates the node's outcome totals. The client would build the record and hash
-- it itself; pgbench cannot hash, so the server hashes the record text (a real
-- reinforce record of the same size, -D record=...) in the first statement, once,
-- as reinforce does. Unlike reinforce, it does no replay check and no validation.
-- outcomes=1 (set by bench/run.py when reinforce appends outcome events, i.e. once
-- the outcomes capability is installed) adds the outcome and its running totals in
-- prme.node_maintenance. (Triggers on prme.nodes fire for every workload alike.)
-- Variables: see reinforce_fresh.sql.
\set i random(1, :nodes)
\set u :i % :owners
\sleep :rtt us
BEGIN;
\sleep :rtt us
SELECT n.*, n.version + 1 AS new_version, gen_random_uuid() AS rid,
       encode(sha256(convert_to(:record, 'UTF8')), 'hex') AS new_checksum
FROM prme.nodes AS n
WHERE n.user_id = 'user_' || :u::text AND n.id = md5('node:' || :i::text)::uuid
FOR UPDATE \gset
\sleep :rtt us
UPDATE prme.nodes AS n SET
    reinforcement_boost = greatest(n.reinforcement_boost, least(n.reinforcement_boost + 0.15, 0.5)),
    confidence_base = greatest(n.confidence_base, least(n.confidence_base + 0.05, 0.95)),
    last_reinforced_at = now(),
    updated_at = now(),
    version = :new_version,
    last_checksum = :new_checksum
WHERE n.user_id = :user_id AND n.id = :id;
\sleep :rtt us
INSERT INTO prme.journal (user_id, node_id, node_version, record_version, op, operation_id, request_id,
                          evidence_id, record, checksum, prev_checksum, recorded_at)
VALUES (:user_id, :id, :new_version, 2, 'reinforce', gen_random_uuid(), :rid,
        NULL, :record, :new_checksum, :last_checksum, now());
\sleep :rtt us
INSERT INTO prme.request_keys (user_id, namespace, request_id, operation, node_id, evidence_id, node_version, created_at)
VALUES (:user_id, :namespace, :rid, 'reinforce', :id, NULL, :new_version, now());
\if :outcomes
\sleep :rtt us
INSERT INTO prme.outcomes (user_id, id, node_id, outcome, weight, evidence_id, profile_id, thread_id, notes,
                           request_id, recorded_by, node_version, created_at)
VALUES (:user_id, gen_random_uuid(), :id, 'explicit_reinforcement', 1.0, NULL, NULL, NULL, NULL,
        :rid, 'reinforce', :new_version, now());
\sleep :rtt us
UPDATE prme.node_maintenance AS k SET
    explicit_reinforcements = k.explicit_reinforcements + 1,
    pending_moves = prme._maintenance_moves(
        k.stability, k.lifecycle_state, k.explicit_reinforcements + 1 - k.reviewed_explicit_reinforcements,
        k.implicit_successes - k.reviewed_implicit_successes,
        k.explicit_corrections - k.reviewed_explicit_corrections
    ),
    last_outcome_at = greatest(k.last_outcome_at, now()),
    updated_at = now()
WHERE k.user_id = :user_id AND k.node_id = :id;
\endif
\sleep :rtt us
COMMIT;

-- c. The same writes as prme.reinforce, done the way a client would without the
-- function: one statement per round trip inside one transaction (5 round trips).
-- The client locks and reads the row (it needs the before state for the record),
-- bumps the node (its confirmation count included), and appends the journal record
-- it built, carrying its idempotency key. The client would build the record and
-- hash it itself; pgbench cannot hash, so the server hashes the record text (a real
-- reinforce record of the same size, -D record=...) in the first statement, once,
-- as reinforce does. Unlike reinforce, it does no replay check and no validation.
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
    last_checksum = :new_checksum,
    reinforcements = n.reinforcements + 1
WHERE n.user_id = :user_id AND n.id = :id;
\sleep :rtt us
INSERT INTO prme.journal (user_id, node_id, node_version, record_version, op, operation_id, request_id,
                          evidence_id, record, checksum, prev_checksum, recorded_at, key_namespace)
VALUES (:user_id, :id, :new_version, 2, 'reinforce', gen_random_uuid(), :rid,
        NULL, :record, :new_checksum, :last_checksum, now(), :namespace);
\sleep :rtt us
COMMIT;

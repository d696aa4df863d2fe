-- d. The same writes as prme.reinforce in one round trip with no logic at all:
-- one data-modifying CTE that bumps the node (its confirmation count included) and
-- appends the journal record that carries the key, whose text (-D record=..., a
-- real reinforce record) and checksum (-D checksum=...) were computed in advance,
-- and returns the node. These two rows are all a fresh confirmation writes
-- (docs/REINFORCE.md, "Hot path"). No validation, no replay check, no record
-- building, no hashing, no procedural code: the limit for these writes on this
-- server. Variables: see reinforce_fresh.sql.
\set i random(1, :nodes)
\set u :i % :owners
\sleep :rtt us
WITH n AS (
    UPDATE prme.nodes AS n SET
        reinforcement_boost = greatest(n.reinforcement_boost, least(n.reinforcement_boost + 0.15, 0.5)),
        confidence_base = greatest(n.confidence_base, least(n.confidence_base + 0.05, 0.95)),
        last_reinforced_at = now(),
        updated_at = now(),
        version = n.version + 1,
        last_checksum = :checksum,
        reinforcements = n.reinforcements + 1
    WHERE n.user_id = 'user_' || :u::text AND n.id = md5('node:' || :i::text)::uuid
    RETURNING n.id, n.user_id, n.namespace, n.scope, n.kind, n.content, n.confidence_base, n.salience_base,
              n.reinforcement_boost, n.last_reinforced_at, n.evidence_refs, n.stability, n.next_review_at,
              n.lifecycle_state, n.decay_profile, n.created_at, n.updated_at, n.version
), j AS (
    INSERT INTO prme.journal (user_id, node_id, node_version, record_version, op, operation_id, request_id,
                              evidence_id, record, checksum, prev_checksum, recorded_at, key_namespace)
    SELECT n.user_id, n.id, n.version, 2, 'reinforce', gen_random_uuid(), gen_random_uuid(),
           NULL, :record, :checksum, :checksum, now(), n.namespace
    FROM n
)
SELECT n.*, FALSE AS replayed FROM n;

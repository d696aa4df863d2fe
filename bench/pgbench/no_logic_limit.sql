-- d. The same writes as prme.reinforce in one round trip with no logic at all:
-- one data-modifying CTE that bumps the node, appends a journal row whose text
-- (-D record=..., a real reinforce record) and checksum (-D checksum=...) were
-- computed in advance, claims the key, and returns the node; with outcomes=1 (see
-- client_side.sql) it also appends the outcome and updates the outcome totals.
-- No validation, no replay check, no record building, no hashing, no procedural
-- code: the limit for these writes on this server. Variables: see reinforce_fresh.sql.
\set i random(1, :nodes)
\set u :i % :owners
\sleep :rtt us
\if :outcomes
WITH r AS MATERIALIZED (
    SELECT gen_random_uuid() AS rid
), n AS (
    UPDATE prme.nodes AS n SET
        reinforcement_boost = greatest(n.reinforcement_boost, least(n.reinforcement_boost + 0.15, 0.5)),
        confidence_base = greatest(n.confidence_base, least(n.confidence_base + 0.05, 0.95)),
        last_reinforced_at = now(),
        updated_at = now(),
        version = n.version + 1,
        last_checksum = :checksum
    WHERE n.user_id = 'user_' || :u::text AND n.id = md5('node:' || :i::text)::uuid
    RETURNING n.id, n.user_id, n.namespace, n.scope, n.kind, n.content, n.confidence_base, n.salience_base,
              n.reinforcement_boost, n.last_reinforced_at, n.evidence_refs, n.stability, n.next_review_at,
              n.lifecycle_state, n.decay_profile, n.created_at, n.updated_at, n.version
), j AS (
    INSERT INTO prme.journal (user_id, node_id, node_version, record_version, op, operation_id, request_id,
                              evidence_id, record, checksum, prev_checksum, recorded_at)
    SELECT n.user_id, n.id, n.version, 2, 'reinforce', gen_random_uuid(), r.rid,
           NULL, :record, :checksum, :checksum, now()
    FROM n, r
), k AS (
    INSERT INTO prme.request_keys (user_id, namespace, request_id, operation, node_id, evidence_id, node_version, created_at)
    SELECT n.user_id, n.namespace, r.rid, 'reinforce', n.id, NULL, n.version, now() FROM n, r
), o AS (
    INSERT INTO prme.outcomes (user_id, id, node_id, outcome, weight, evidence_id, profile_id, thread_id, notes,
                               request_id, recorded_by, node_version, created_at)
    SELECT n.user_id, gen_random_uuid(), n.id, 'explicit_reinforcement', 1.0, NULL, NULL, NULL, NULL,
           r.rid, 'reinforce', n.version, now()
    FROM n, r
), m AS (
    UPDATE prme.node_maintenance AS k SET
        explicit_reinforcements = k.explicit_reinforcements + 1,
        pending_moves = prme._maintenance_moves(
            k.stability, k.lifecycle_state, k.explicit_reinforcements + 1 - k.reviewed_explicit_reinforcements,
            k.implicit_successes - k.reviewed_implicit_successes,
            k.explicit_corrections - k.reviewed_explicit_corrections
        ),
        last_outcome_at = greatest(k.last_outcome_at, now()),
        updated_at = now()
    FROM n
    WHERE k.user_id = n.user_id AND k.node_id = n.id
)
SELECT n.*, FALSE AS replayed FROM n;
\else
WITH r AS MATERIALIZED (
    SELECT gen_random_uuid() AS rid
), n AS (
    UPDATE prme.nodes AS n SET
        reinforcement_boost = greatest(n.reinforcement_boost, least(n.reinforcement_boost + 0.15, 0.5)),
        confidence_base = greatest(n.confidence_base, least(n.confidence_base + 0.05, 0.95)),
        last_reinforced_at = now(),
        updated_at = now(),
        version = n.version + 1,
        last_checksum = :checksum
    WHERE n.user_id = 'user_' || :u::text AND n.id = md5('node:' || :i::text)::uuid
    RETURNING n.id, n.user_id, n.namespace, n.scope, n.kind, n.content, n.confidence_base, n.salience_base,
              n.reinforcement_boost, n.last_reinforced_at, n.evidence_refs, n.stability, n.next_review_at,
              n.lifecycle_state, n.decay_profile, n.created_at, n.updated_at, n.version
), j AS (
    INSERT INTO prme.journal (user_id, node_id, node_version, record_version, op, operation_id, request_id,
                              evidence_id, record, checksum, prev_checksum, recorded_at)
    SELECT n.user_id, n.id, n.version, 2, 'reinforce', gen_random_uuid(), r.rid,
           NULL, :record, :checksum, :checksum, now()
    FROM n, r
), k AS (
    INSERT INTO prme.request_keys (user_id, namespace, request_id, operation, node_id, evidence_id, node_version, created_at)
    SELECT n.user_id, n.namespace, r.rid, 'reinforce', n.id, NULL, n.version, now() FROM n, r
)
SELECT n.*, FALSE AS replayed FROM n;
\endif

-- =============================================================================
-- test_reinforce.sql: prme.reinforce follows every rule of docs/DESIGN.md section 3.
--
-- Proves: the additive caps from many starting values (never reduced, salience
-- unchanged); version +1 and last_reinforced_at = updated_at = now(); evidence
-- appended in order without de-duplication; idempotent replays that return the
-- current node and write nothing; PR409 for a key reused for anything else; keys
-- scoped by owner and namespace; PR404 (never "forbidden") for missing, foreign and
-- archived nodes and for evidence of another owner or scope; calls without a key
-- always count; named notation; malformed UUIDs fail before anything runs.
--
-- Fixed ids (hex mnemonics):
--   aaaaaaaa-...-00000000000N  alice's nodes     bbbbbbbb-...  bob's nodes
--   eeeeeeee-...-0000000000aN  alice's events    eeeeeeee-...-0000000000bN bob's
--   cccccccc-...-00000000000N  request ids       dddddddd-...  seeded cap nodes
-- Everything runs in one transaction, so now() is one instant throughout: nodes
-- that must show a timestamp change are seeded with 2020 timestamps.
-- =============================================================================
BEGIN;
SELECT plan(93);

-- -----------------------------------------------------------------------------
-- Helpers (pg_temp: gone at ROLLBACK)
-- -----------------------------------------------------------------------------

-- Everything reinforce could write, including each node row's ctid (an UPDATE,
-- even one writing identical values, moves the row), summarised in one text.
CREATE FUNCTION pg_temp.fingerprint() RETURNS text LANGUAGE sql AS $$
    SELECT format(
        'nodes=%s events=%s journal=%s request_keys=%s md5=%s',
        (SELECT count(*) FROM prme.nodes), (SELECT count(*) FROM prme.events),
        (SELECT count(*) FROM prme.journal), (SELECT count(*) FROM prme.request_keys),
        md5(concat_ws('#',
            (SELECT string_agg(n.ctid::text || n::text, '|' ORDER BY n.user_id, n.id) FROM prme.nodes AS n),
            (SELECT string_agg(e::text, '|' ORDER BY e.user_id, e.id) FROM prme.events AS e),
            (SELECT string_agg(j::text, '|' ORDER BY j.user_id, j.node_id, j.node_version) FROM prme.journal AS j),
            (SELECT string_agg(k::text, '|' ORDER BY k.user_id, k.namespace, k.request_id) FROM prme.request_keys AS k)
        ))
    )
$$;
CREATE TEMP TABLE mark (fp text);
INSERT INTO mark VALUES (NULL);
-- Usage: UPDATE mark SET fp = pg_temp.fingerprint();  ...bad calls...  SELECT pg_temp.unchanged('...');
CREATE FUNCTION pg_temp.unchanged(description text) RETURNS text LANGUAGE sql AS $$
    SELECT is(pg_temp.fingerprint(), (SELECT fp FROM mark), description)
$$;

-- A node with any starting boost/confidence (add_node always starts boost at 0)
-- and 2020 timestamps, with a genuine create record so verify_journal and
-- replay_node still hold for it.
CREATE FUNCTION pg_temp.seed_node(
    p_user text, p_id uuid, p_boost numeric, p_confidence numeric, p_scope text DEFAULT 'personal'
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v prme.nodes;
    e prme.journal;
BEGIN
    v.id := p_id; v.user_id := p_user; v.namespace := 'default'; v.scope := p_scope; v.kind := 'fact';
    v.content := 'seeded'; v.confidence_base := p_confidence; v.salience_base := 0.3;
    v.reinforcement_boost := p_boost; v.evidence_refs := '{}'; v.stability := 'low';
    v.lifecycle_state := 'active'; v.decay_profile := 'medium';
    v.created_at := '2020-01-02 03:04:05+00'; v.updated_at := v.created_at; v.version := 1;
    e := prme._journal_entry('create', NULL, gen_random_uuid(), NULL, NULL, NULL, v);
    v.last_checksum := e.checksum;
    -- Named columns: nodes also has derived, generated columns.
    INSERT INTO prme.nodes (id, user_id, namespace, scope, kind, content, confidence_base, salience_base, reinforcement_boost, last_reinforced_at, evidence_refs, stability, next_review_at, lifecycle_state, decay_profile, created_at, updated_at, version, last_checksum)
    SELECT v.id, v.user_id, v.namespace, v.scope, v.kind, v.content, v.confidence_base, v.salience_base, v.reinforcement_boost, v.last_reinforced_at, v.evidence_refs, v.stability, v.next_review_at, v.lifecycle_state, v.decay_profile, v.created_at, v.updated_at, v.version, v.last_checksum;
    INSERT INTO prme.journal SELECT e.*;
END;
$$;

-- -----------------------------------------------------------------------------
-- 1. Caps: boost +0.15 capped at 0.5, confidence +0.05 capped at 0.95, never reduced
-- -----------------------------------------------------------------------------
CREATE TEMP TABLE cap_cases (n integer PRIMARY KEY, start numeric, boost_after numeric, confidence_after numeric);
INSERT INTO cap_cases VALUES
    (1, 0, 0.15, 0.05),
    (2, 0.3, 0.45, 0.35),
    (3, 0.35, 0.5, 0.4),
    (4, 0.4, 0.5, 0.45),
    (5, 0.45, 0.5, 0.5),
    (6, 0.5, 0.5, 0.55),
    (7, 0.9, 0.9, 0.95),     -- boost above its cap: kept
    (8, 0.92, 0.92, 0.95),   -- confidence within 0.05 of its cap: stops at the cap
    (9, 0.95, 0.95, 0.95),
    (10, 0.97, 0.97, 0.97),  -- confidence above its cap: kept, not pulled down to 0.95
    (11, 0.9999, 0.9999, 0.9999),
    (12, 1, 1, 1);

-- Each case: a node whose boost and confidence both start at `start`.
DO $$
BEGIN
    PERFORM pg_temp.seed_node('capper', ('dddddddd-0000-4000-8000-0000000000' || lpad(c.n::text, 2, '0'))::uuid,
                              c.start, c.start)
    FROM cap_cases AS c;
END;
$$;

CREATE TEMP TABLE cap_results AS
SELECT c.n, r.*
FROM cap_cases AS c,
    LATERAL prme.reinforce(('dddddddd-0000-4000-8000-0000000000' || lpad(c.n::text, 2, '0'))::uuid, 'capper') AS r;

SELECT is(r.reinforcement_boost, c.boost_after::numeric(5, 4),
          format('boost %s -> %s', c.start, c.boost_after))
FROM cap_cases AS c JOIN cap_results AS r USING (n) ORDER BY n;

SELECT is(r.confidence_base, c.confidence_after::numeric(5, 4),
          format('confidence %s -> %s', c.start, c.confidence_after))
FROM cap_cases AS c JOIN cap_results AS r USING (n) ORDER BY n;

SELECT is_empty(
    $$SELECT n FROM cap_cases JOIN cap_results USING (n)
      WHERE reinforcement_boost < start OR confidence_base < start$$,
    'caps never reduce a value, whatever it starts at');

SELECT is_empty(
    $$SELECT n FROM cap_results WHERE salience_base <> 0.3$$,
    'salience_base is unchanged by reinforce');

SELECT is_empty(
    $$SELECT n FROM cap_results
      WHERE version <> 2 OR replayed OR last_reinforced_at <> now() OR updated_at <> now()
         OR created_at <> '2020-01-02 03:04:05+00'$$,
    'each call: version 1 -> 2, replayed false, last_reinforced_at = updated_at = now(), created_at kept');

SELECT results_eq(
    $$SELECT r.n, r.reinforcement_boost, r.confidence_base, r.version, r.updated_at
      FROM cap_results AS r ORDER BY r.n$$,
    $$SELECT c.n, n.reinforcement_boost::numeric, n.confidence_base::numeric, n.version::bigint, n.updated_at
      FROM cap_cases AS c
      JOIN prme.nodes AS n ON n.user_id = 'capper'
       AND n.id = ('dddddddd-0000-4000-8000-0000000000' || lpad(c.n::text, 2, '0'))::uuid
      ORDER BY c.n$$,
    'the returned node is the stored node');

-- Repeated confirmations climb to the caps and stay there.
SELECT lives_ok(
    $$SELECT prme.add_node('alice', 'climbs', confidence_base => 0.8, salience_base => 0.7,
                           node_id => 'aaaaaaaa-0000-4000-8000-000000000009')$$,
    'add_node for the climbing node');
CREATE TEMP TABLE climb AS
SELECT g AS step, r.reinforcement_boost, r.confidence_base, r.salience_base, r.version
FROM generate_series(1, 5) AS g,
    -- user_id mentions g so the call runs once per row (a call with constant
    -- arguments is evaluated once and its result rescanned).
    LATERAL prme.reinforce('aaaaaaaa-0000-4000-8000-000000000009', 'alice' || left(g::text, 0)) AS r;
SELECT results_eq(
    $$SELECT step, reinforcement_boost, confidence_base, salience_base, version FROM climb ORDER BY step$$,
    $$VALUES (1, 0.15::numeric(5, 4), 0.85::numeric(5, 4), 0.7::numeric(5, 4), 2::bigint),
             (2, 0.30, 0.90, 0.7, 3),
             (3, 0.45, 0.95, 0.7, 4),
             (4, 0.50, 0.95, 0.7, 5),
             (5, 0.50, 0.95, 0.7, 6)$$,
    'five confirmations: boost 0.15/0.30/0.45/0.50/0.50, confidence 0.85/0.90/0.95/0.95/0.95, version +1 each');

-- -----------------------------------------------------------------------------
-- Fixtures for the rest: alice's and bob's nodes and events
-- -----------------------------------------------------------------------------
SELECT lives_ok($$
    SELECT prme.add_node('alice', 'main', node_id => 'aaaaaaaa-0000-4000-8000-000000000001', salience_base => 0.7);
    SELECT prme.add_node('alice', 'same namespace', node_id => 'aaaaaaaa-0000-4000-8000-000000000002');
    SELECT prme.add_node('alice', 'work namespace', namespace => 'work', node_id => 'aaaaaaaa-0000-4000-8000-000000000003');
    SELECT prme.add_node('alice', 'to archive', node_id => 'aaaaaaaa-0000-4000-8000-000000000004');
    SELECT prme.add_node('alice', 'work scope', scope => 'work', node_id => 'aaaaaaaa-0000-4000-8000-000000000005');
    SELECT prme.add_node('alice', 'replayed after archive', node_id => 'aaaaaaaa-0000-4000-8000-000000000006');
    SELECT prme.add_node('alice', 'no keys', node_id => 'aaaaaaaa-0000-4000-8000-000000000007');
    SELECT prme.add_node('bob', 'bob main', node_id => 'bbbbbbbb-0000-4000-8000-000000000001');
    SELECT prme.add_event('alice', 'e a1', event_id => 'eeeeeeee-0000-4000-8000-0000000000a1');
    SELECT prme.add_event('alice', 'e a2', event_id => 'eeeeeeee-0000-4000-8000-0000000000a2');
    SELECT prme.add_event('alice', 'e a3 work', scope => 'work', event_id => 'eeeeeeee-0000-4000-8000-0000000000a3');
    SELECT prme.add_event('bob', 'e b1', event_id => 'eeeeeeee-0000-4000-8000-0000000000b1');
$$, 'fixtures: nodes and events of alice and bob');

-- -----------------------------------------------------------------------------
-- 2. One confirmation with evidence and a key
-- -----------------------------------------------------------------------------
SELECT results_eq(
    $$SELECT replayed, version, evidence_refs, salience_base, reinforcement_boost, confidence_base
      FROM prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',
                          'eeeeeeee-0000-4000-8000-0000000000a1', 'cccccccc-0000-4000-8000-000000000001')$$,
    $$VALUES (false, 2::bigint, '{eeeeeeee-0000-4000-8000-0000000000a1}'::uuid[], 0.7::numeric(5, 4),
              0.15::numeric(5, 4), 0.55::numeric(5, 4))$$,
    'reinforce with evidence and key K1: counts, version 2, evidence appended');

SELECT results_eq(
    $$SELECT op, node_id, evidence_id, node_version, key_namespace FROM prme.journal
      WHERE user_id = 'alice' AND request_id = 'cccccccc-0000-4000-8000-000000000001'
      UNION ALL
      SELECT operation, node_id, evidence_id, node_version, namespace FROM prme.request_keys
      WHERE user_id = 'alice' AND request_id = 'cccccccc-0000-4000-8000-000000000001'$$,
    $$VALUES ('reinforce', 'aaaaaaaa-0000-4000-8000-000000000001'::uuid,
              'eeeeeeee-0000-4000-8000-0000000000a1'::uuid, 2::bigint, 'default')$$,
    'the key is the journal record it wrote (operation, node, evidence, namespace), with no key row of its own');

SELECT results_eq(
    $$SELECT op, request_id, evidence_id FROM prme.journal
      WHERE user_id = 'alice' AND node_id = 'aaaaaaaa-0000-4000-8000-000000000001' ORDER BY node_version$$,
    $$VALUES ('create', NULL::uuid, NULL::uuid),
             ('reinforce', 'cccccccc-0000-4000-8000-000000000001', 'eeeeeeee-0000-4000-8000-0000000000a1')$$,
    'one journal record per mutation: create, then reinforce with its key and evidence');

-- -----------------------------------------------------------------------------
-- 3. evidence_refs: appended in order, never de-duplicated; NULL appends nothing
-- -----------------------------------------------------------------------------
SELECT is(
    (prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',
                    'eeeeeeee-0000-4000-8000-0000000000a2', 'cccccccc-0000-4000-8000-000000000002')).evidence_refs,
    '{eeeeeeee-0000-4000-8000-0000000000a1,eeeeeeee-0000-4000-8000-0000000000a2}'::uuid[],
    'second evidence appended after the first');
SELECT is(
    (prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',
                    'eeeeeeee-0000-4000-8000-0000000000a1', 'cccccccc-0000-4000-8000-000000000003')).evidence_refs,
    '{eeeeeeee-0000-4000-8000-0000000000a1,eeeeeeee-0000-4000-8000-0000000000a2,eeeeeeee-0000-4000-8000-0000000000a1}'::uuid[],
    'the same evidence under another key appears twice');
SELECT results_eq(
    $$SELECT evidence_refs, version FROM prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',
                                                        NULL, 'cccccccc-0000-4000-8000-000000000004')$$,
    $$VALUES ('{eeeeeeee-0000-4000-8000-0000000000a1,eeeeeeee-0000-4000-8000-0000000000a2,eeeeeeee-0000-4000-8000-0000000000a1}'::uuid[], 5::bigint)$$,
    'NULL evidence appends nothing but still counts');
SELECT is(
    (prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice', 'eeeeeeee-0000-4000-8000-0000000000a1')).evidence_refs,
    '{eeeeeeee-0000-4000-8000-0000000000a1,eeeeeeee-0000-4000-8000-0000000000a2,eeeeeeee-0000-4000-8000-0000000000a1,eeeeeeee-0000-4000-8000-0000000000a1}'::uuid[],
    'the same evidence without a key is appended again');

-- -----------------------------------------------------------------------------
-- 4. Replays: the current node, replayed = true, nothing written
-- -----------------------------------------------------------------------------
UPDATE mark SET fp = pg_temp.fingerprint();
SELECT results_eq(
    $$SELECT replayed, version, cardinality(evidence_refs) FROM prme.reinforce(
          'aaaaaaaa-0000-4000-8000-000000000001', 'alice',
          'eeeeeeee-0000-4000-8000-0000000000a1', 'cccccccc-0000-4000-8000-000000000001')$$,
    $$VALUES (true, 6::bigint, 4)$$,
    'replay of K1: replayed = true and the current node (version 6, four refs), not the version K1 wrote');
SELECT is(
    (prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice', NULL, 'cccccccc-0000-4000-8000-000000000004')).replayed,
    true,
    'replay of a key bound to no evidence');
SELECT is(
    (prme.reinforce(request_id => 'cccccccc-0000-4000-8000-000000000002', user_id => 'alice',
                    evidence_id => 'eeeeeeee-0000-4000-8000-0000000000a2',
                    node_id => 'aaaaaaaa-0000-4000-8000-000000000001')).replayed,
    true,
    'replay in named notation, arguments in another order');
SELECT pg_temp.unchanged('replays change nothing: no version, journal row, key, timestamp or row version');

-- A node untouched since 2020 with a committed key bound to it (written here as
-- the key of its first version): a replay must not move updated_at.
DO $$
BEGIN
    PERFORM pg_temp.seed_node('alice', 'aaaaaaaa-0000-4000-8000-000000000008', 0, 0.5);
    INSERT INTO prme.request_keys (user_id, namespace, request_id, operation, node_id, evidence_id, node_version, created_at)
    VALUES ('alice', 'default', 'cccccccc-0000-4000-8000-000000000008', 'reinforce',
            'aaaaaaaa-0000-4000-8000-000000000008', NULL, 1, '2020-01-02 03:04:05+00');
END;
$$;
UPDATE mark SET fp = pg_temp.fingerprint();
SELECT results_eq(
    $$SELECT replayed, version, updated_at, last_reinforced_at, reinforcement_boost
      FROM prme.reinforce('aaaaaaaa-0000-4000-8000-000000000008', 'alice', NULL, 'cccccccc-0000-4000-8000-000000000008')$$,
    $$VALUES (true, 1::bigint, '2020-01-02 03:04:05+00'::timestamptz, NULL::timestamptz, 0::numeric(5, 4))$$,
    'replay of an old key: updated_at and last_reinforced_at stay as they were, no increment');
SELECT pg_temp.unchanged('that replay wrote nothing');

-- A replay shows changes made after the key was used.
SELECT is(
    (prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice')).version, 7::bigint,
    'a later confirmation without a key: version 7');
SELECT results_eq(
    $$SELECT replayed, version FROM prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',
          'eeeeeeee-0000-4000-8000-0000000000a1', 'cccccccc-0000-4000-8000-000000000001')$$,
    $$VALUES (true, 7::bigint)$$,
    'replay of K1 now shows version 7');

-- -----------------------------------------------------------------------------
-- 5. A key reused for anything else: PR409, nothing changed
-- -----------------------------------------------------------------------------
-- A key bound to another operation (a later capability) on the same node and evidence.
INSERT INTO prme.request_keys (user_id, namespace, request_id, operation, node_id, evidence_id, node_version, created_at)
VALUES ('alice', 'default', 'cccccccc-0000-4000-8000-000000000005', 'supersede',
        'aaaaaaaa-0000-4000-8000-000000000001', NULL, 7, now());
UPDATE mark SET fp = pg_temp.fingerprint();

SELECT throws_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000002', 'alice',
                            'eeeeeeee-0000-4000-8000-0000000000a1', 'cccccccc-0000-4000-8000-000000000001')$$,
    'PR409', 'request_id was already used for another request',
    'K1 with another node of the same namespace: PR409');
SELECT throws_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',
                            'eeeeeeee-0000-4000-8000-0000000000a2', 'cccccccc-0000-4000-8000-000000000001')$$,
    'PR409', 'request_id was already used for another request',
    'K1 with other evidence: PR409');
SELECT throws_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',
                            NULL, 'cccccccc-0000-4000-8000-000000000001')$$,
    'PR409', 'request_id was already used for another request',
    'K1 (bound to evidence) with NULL evidence: PR409');
SELECT throws_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',
                            'eeeeeeee-0000-4000-8000-0000000000a1', 'cccccccc-0000-4000-8000-000000000004')$$,
    'PR409', 'request_id was already used for another request',
    'K4 (bound to NULL evidence) with evidence: PR409');
SELECT throws_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',
                            NULL, 'cccccccc-0000-4000-8000-000000000005')$$,
    'PR409', 'request_id was already used for another request',
    'a key bound to another operation on the same node: PR409');
SELECT pg_temp.unchanged('conflicts change nothing');

-- -----------------------------------------------------------------------------
-- 6. Keys are scoped by owner and by namespace
-- -----------------------------------------------------------------------------
SELECT results_eq(
    $$SELECT replayed, version FROM prme.reinforce('bbbbbbbb-0000-4000-8000-000000000001', 'bob',
          'eeeeeeee-0000-4000-8000-0000000000b1', 'cccccccc-0000-4000-8000-000000000001')$$,
    $$VALUES (false, 2::bigint)$$,
    'bob uses the request_id alice used for K1: an independent key that counts');
SELECT results_eq(
    $$SELECT user_id, node_id FROM prme.journal
      WHERE request_id = 'cccccccc-0000-4000-8000-000000000001' ORDER BY user_id$$,
    $$VALUES ('alice', 'aaaaaaaa-0000-4000-8000-000000000001'::uuid), ('bob', 'bbbbbbbb-0000-4000-8000-000000000001'::uuid)$$,
    'two keys with one UUID, one per owner; alice''s binding untouched');
SELECT results_eq(
    $$SELECT replayed, version FROM prme.reinforce('aaaaaaaa-0000-4000-8000-000000000003', 'alice',
          NULL, 'cccccccc-0000-4000-8000-000000000001')$$,
    $$VALUES (false, 2::bigint)$$,
    'alice reuses K1 on a node in namespace work: an independent key that counts');
SELECT results_eq(
    $$SELECT replayed, version FROM prme.reinforce('aaaaaaaa-0000-4000-8000-000000000003', 'alice',
          NULL, 'cccccccc-0000-4000-8000-000000000001')$$,
    $$VALUES (true, 2::bigint)$$,
    '... and replays within namespace work');

-- -----------------------------------------------------------------------------
-- 7. Not found: missing, foreign, archived nodes; evidence of another owner or scope
-- -----------------------------------------------------------------------------
SELECT is(
    (prme.archive_node('alice', 'aaaaaaaa-0000-4000-8000-000000000004')).lifecycle_state, 'archived',
    'archive node 4');
UPDATE mark SET fp = pg_temp.fingerprint();

SELECT throws_ok(
    $$SELECT prme.reinforce('bbbbbbbb-0000-4000-8000-000000000001', 'alice')$$,
    'PR404', 'node not found', 'bob''s node as alice: PR404 node not found');
SELECT throws_ok(
    $$SELECT prme.reinforce('bbbbbbbb-0000-4000-8000-000000000001', 'alice', NULL, 'cccccccc-0000-4000-8000-000000000009')$$,
    'PR404', 'node not found', 'bob''s node as alice, with a key: PR404');
SELECT throws_ok(
    $$SELECT prme.reinforce('bbbbbbbb-0000-4000-8000-000000000001', 'alice', NULL, 'cccccccc-0000-4000-8000-000000000001')$$,
    'PR404', 'node not found', 'bob''s node as alice with the key bob used on it: PR404, not a replay');
SELECT throws_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-0000000000ff', 'alice')$$,
    'PR404', 'node not found', 'a missing node: PR404 with the same message');
SELECT throws_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-0000000000ff', 'alice', NULL, 'cccccccc-0000-4000-8000-000000000009')$$,
    'PR404', 'node not found', 'a missing node, with a key: PR404');
SELECT throws_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000004', 'alice')$$,
    'PR404', 'node not found', 'an archived node: PR404');
SELECT throws_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000004', 'alice', NULL, 'cccccccc-0000-4000-8000-000000000009')$$,
    'PR404', 'node not found', 'an archived node, with a fresh key: PR404');
SELECT throws_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice', 'eeeeeeee-0000-4000-8000-0000000000b1')$$,
    'PR404', 'evidence not found', 'evidence of another owner: PR404');
SELECT throws_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice', 'eeeeeeee-0000-4000-8000-0000000000a3')$$,
    'PR404', 'evidence not found', 'evidence of another scope (work, node is personal): PR404');
SELECT throws_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice', 'eeeeeeee-0000-4000-8000-0000000000ff')$$,
    'PR404', 'evidence not found', 'missing evidence: PR404');
SELECT throws_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',
                            'eeeeeeee-0000-4000-8000-0000000000b1', 'cccccccc-0000-4000-8000-000000000009')$$,
    'PR404', 'evidence not found', 'foreign evidence with a fresh key: PR404');
SELECT pg_temp.unchanged('not-found calls change nothing and reserve no key');

SELECT results_eq(
    $$SELECT replayed, version FROM prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',
          'eeeeeeee-0000-4000-8000-0000000000a1', 'cccccccc-0000-4000-8000-000000000009')$$,
    $$VALUES (false, 8::bigint)$$,
    'the key of the failed call is still free: using it now counts');
SELECT is(
    (prme.reinforce('aaaaaaaa-0000-4000-8000-000000000005', 'alice', 'eeeeeeee-0000-4000-8000-0000000000a3')).evidence_refs,
    '{eeeeeeee-0000-4000-8000-0000000000a3}'::uuid[],
    'evidence of the node''s own scope (work) is accepted');
SELECT is_empty(
    $$SELECT p.oid::regprocedure FROM pg_proc AS p
      WHERE p.pronamespace = 'prme'::regnamespace AND p.prosrc ~* 'forbidden|permission|not allowed to'$$,
    'no prme function says forbidden: existence is never revealed');

-- -----------------------------------------------------------------------------
-- 8. A replay after archive restores nothing
-- -----------------------------------------------------------------------------
SELECT is(
    (prme.reinforce('aaaaaaaa-0000-4000-8000-000000000006', 'alice', NULL, 'cccccccc-0000-4000-8000-000000000006')).version,
    2::bigint, 'node 6 confirmed with K6');
SELECT is(
    (prme.archive_node('alice', 'aaaaaaaa-0000-4000-8000-000000000006')).version, 3::bigint,
    'node 6 archived');
UPDATE mark SET fp = pg_temp.fingerprint();
SELECT results_eq(
    $$SELECT replayed, lifecycle_state, version FROM prme.reinforce(
          'aaaaaaaa-0000-4000-8000-000000000006', 'alice', NULL, 'cccccccc-0000-4000-8000-000000000006')$$,
    $$VALUES (true, 'archived', 3::bigint)$$,
    'replay of K6 after archive: replayed, still archived, version 3');
SELECT pg_temp.unchanged('the replay after archive restored nothing');

-- -----------------------------------------------------------------------------
-- 9. Calls without request_id always count; named notation
-- -----------------------------------------------------------------------------
SELECT results_eq(
    $$SELECT r.version, r.replayed
      FROM generate_series(1, 3) AS g,
          LATERAL prme.reinforce('aaaaaaaa-0000-4000-8000-000000000007', 'alice' || left(g::text, 0)) AS r
      ORDER BY g$$,
    $$VALUES (2::bigint, false), (3::bigint, false), (4::bigint, false)$$,
    'three identical calls without a key count three times');
SELECT is(
    (SELECT count(*) FROM prme.journal WHERE user_id = 'alice' AND node_id = 'aaaaaaaa-0000-4000-8000-000000000007' AND op = 'reinforce'),
    3::bigint, '... with three reinforce records');
SELECT is(
    (SELECT count(*) FROM prme.request_keys WHERE user_id = 'alice' AND node_id = 'aaaaaaaa-0000-4000-8000-000000000007'),
    0::bigint, '... and no keys');
SELECT is(
    (prme.reinforce(user_id => 'alice', node_id => 'aaaaaaaa-0000-4000-8000-000000000007')).version, 5::bigint,
    'named notation: reinforce(user_id => ..., node_id => ...)');
SELECT results_eq(
    $$SELECT replayed, version, evidence_refs FROM prme.reinforce(
          evidence_id => 'eeeeeeee-0000-4000-8000-0000000000a2', request_id => 'cccccccc-0000-4000-8000-000000000007',
          node_id => 'aaaaaaaa-0000-4000-8000-000000000007', user_id => 'alice')$$,
    $$VALUES (false, 6::bigint, '{eeeeeeee-0000-4000-8000-0000000000a2}'::uuid[])$$,
    'named notation with all four parameters in another order');

-- -----------------------------------------------------------------------------
-- 10. Malformed input fails before anything runs
-- -----------------------------------------------------------------------------
UPDATE mark SET fp = pg_temp.fingerprint();
SELECT throws_ok($$SELECT prme.reinforce('not-a-uuid', 'alice')$$, '22P02', NULL, 'malformed node_id: 22P02');
SELECT throws_ok($$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice', 'e1')$$,
                 '22P02', NULL, 'malformed evidence_id: 22P02');
SELECT throws_ok($$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice', NULL, 'aaaaaaaa-0000-4000-8000-00000000000')$$,
                 '22P02', NULL, 'request_id one digit short: 22P02');
SELECT throws_ok($$SELECT prme.reinforce(node_id => 'aaaaaaaa-0000-4000-8000-000000000001''; DROP TABLE prme.nodes; --', user_id => 'alice')$$,
                 '22P02', NULL, 'SQL in a uuid argument: 22P02');
SELECT throws_ok($$SELECT prme.reinforce(NULL, 'alice')$$, 'PR422', 'node_id must not be null', 'NULL node_id: PR422');
SELECT throws_ok($$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', NULL)$$,
                 'PR422', 'user_id must not be null', 'NULL user_id: PR422');
SELECT pg_temp.unchanged('malformed calls change nothing');

-- -----------------------------------------------------------------------------
-- 11. The caller's transaction settings do not change the outcome
-- -----------------------------------------------------------------------------
-- A client may run SET CONSTRAINTS ALL IMMEDIATE in its transaction (some
-- frameworks do, to surface constraint errors early). A keyed confirmation must
-- still work: its key may not depend on a deferred check.
SET CONSTRAINTS ALL IMMEDIATE;
SELECT lives_ok(
    $$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000007', 'alice', NULL, 'cccccccc-0000-4000-8000-0000000000d1')$$,
    'a keyed reinforce works under SET CONSTRAINTS ALL IMMEDIATE');
SET CONSTRAINTS ALL DEFERRED;

-- -----------------------------------------------------------------------------
-- 12. After all of this, every journal verifies and every node replays
-- -----------------------------------------------------------------------------
SELECT is_empty($$SELECT * FROM prme.verify_journal('alice')$$, 'alice''s journal verifies');
SELECT is_empty($$SELECT * FROM prme.verify_journal('bob')$$, 'bob''s journal verifies');
SELECT is_empty($$SELECT * FROM prme.verify_journal('capper')$$, 'the cap nodes'' journal verifies');
SELECT is_empty(
    $$SELECT n.user_id, n.id, r.problem FROM prme.nodes AS n, LATERAL prme.replay_node(n.user_id, n.id) AS r
      WHERE n.user_id IN ('alice', 'bob', 'capper') AND NOT r.matches$$,
    'every node replays from its journal (the caps re-derived under additive_caps_v1)');

SELECT * FROM finish();
ROLLBACK;

-- =============================================================================
-- test_outcomes.sql: outcome events, the per-node summary and correction linking
-- (issue 7, items 1 and 2; docs/MAINTENANCE.md).
--
-- Proves: record_outcome appends one event with the weight of its outcome and
-- never changes the node or the journal; the summary counts, scores and suggests
-- stability by its rules; request_id makes record_outcome idempotent like
-- reinforce (same arguments replay, anything else PR409, keys shared with
-- reinforce and scoped by owner); PR404 for missing, foreign and archived nodes
-- and foreign or other-scope evidence; PR422 for bad arguments, with nothing
-- written; reinforce appends an explicit_reinforcement event when it applies and
-- not on replay; outcomes are append-only and the running totals equal a rebuild;
-- tokens and overlap follow their definition at the 0.45 boundary; exactly one
-- match links an explicit_correction, zero or several go to the inbox; only
-- active candidates of the owner count; the inbox resolves once; is_correction
-- recognises correction phrasing and leaves ordinary messages alone.
--
-- Fixed ids: a1000000-...-0000000000NN oc_alice's nodes, b1000000-... oc_bob's,
-- e1000000-... events, c1000000-... request ids, d1000000-... linking nodes.
-- =============================================================================
BEGIN;
SELECT plan(131);

-- Everything an outcome call could write, summarised in one text.
CREATE FUNCTION pg_temp.fingerprint() RETURNS text LANGUAGE sql AS $$
    SELECT format(
        'nodes=%s journal=%s keys=%s outcomes=%s inbox=%s md5=%s',
        (SELECT count(*) FROM prme.nodes), (SELECT count(*) FROM prme.journal),
        (SELECT count(*) FROM prme.request_keys), (SELECT count(*) FROM prme.outcomes),
        (SELECT count(*) FROM prme.correction_inbox),
        md5(concat_ws('#',
            -- Any write of a memory (its bookkeeping included) moves its row.
            (SELECT string_agg(n.ctid::text || n.version, '|' ORDER BY n.user_id, n.id) FROM prme.nodes AS n),
            (SELECT string_agg(k::text, '|' ORDER BY k.user_id, k.namespace, k.request_id) FROM prme.request_keys AS k)
        ))
    )
$$;
CREATE TEMP TABLE mark (fp text);
INSERT INTO mark VALUES (NULL);
CREATE FUNCTION pg_temp.unchanged(description text) RETURNS text LANGUAGE sql AS $$
    SELECT is(pg_temp.fingerprint(), (SELECT fp FROM mark), description)
$$;

SELECT lives_ok($$
    SELECT prme.add_node('oc_alice', 'Alice writes Python with tabs', node_id => 'a1000000-0000-4000-8000-000000000001');
    SELECT prme.add_node('oc_alice', 'second memory', node_id => 'a1000000-0000-4000-8000-000000000002');
    SELECT prme.add_node('oc_alice', 'work memory', namespace => 'work', node_id => 'a1000000-0000-4000-8000-000000000003');
    SELECT prme.add_node('oc_alice', 'to archive', node_id => 'a1000000-0000-4000-8000-000000000004');
    SELECT prme.add_node('oc_alice', 'summary: implicit only', node_id => 'a1000000-0000-4000-8000-000000000005');
    SELECT prme.add_node('oc_alice', 'summary: neutral only', node_id => 'a1000000-0000-4000-8000-000000000006');
    SELECT prme.add_node('oc_alice', 'summary: nothing', node_id => 'a1000000-0000-4000-8000-000000000007');
    SELECT prme.add_node('oc_alice', 'reinforced', node_id => 'a1000000-0000-4000-8000-000000000008');
    SELECT prme.add_node('oc_bob', 'bob memory', node_id => 'b1000000-0000-4000-8000-000000000001');
    SELECT prme.add_event('oc_alice', 'she said so', event_id => 'e1000000-0000-4000-8000-0000000000a1');
    SELECT prme.add_event('oc_alice', 'at work', scope => 'work', event_id => 'e1000000-0000-4000-8000-0000000000a2');
    SELECT prme.add_event('oc_bob', 'bob said', event_id => 'e1000000-0000-4000-8000-0000000000b1');
    SELECT prme.archive_node('oc_alice', 'a1000000-0000-4000-8000-000000000004');
$$, 'fixtures: nodes and events of oc_alice and oc_bob');

-- -----------------------------------------------------------------------------
-- 1. One event per call, with its weight; the node and journal are untouched
-- -----------------------------------------------------------------------------
UPDATE mark SET fp = pg_temp.fingerprint();
CREATE TEMP TABLE recorded AS
SELECT r.*
FROM (VALUES ('explicit_reinforcement'), ('implicit_success'), ('neutral_exposure'), ('explicit_correction'))
    AS k (outcome),
    LATERAL prme.record_outcome('oc_alice' || left(k.outcome, 0), 'a1000000-0000-4000-8000-000000000001',
                                k.outcome, thread_id => 'thread-1') AS r;
SELECT results_eq(
    $$SELECT outcome, weight, replayed, recorded_by, node_version, thread_id FROM recorded ORDER BY weight DESC$$,
    $$VALUES ('explicit_reinforcement', 1.00::numeric(3, 2), false, 'record_outcome', 1::bigint, 'thread-1'),
             ('implicit_success', 0.20, false, 'record_outcome', 1, 'thread-1'),
             ('neutral_exposure', 0.00, false, 'record_outcome', 1, 'thread-1'),
             ('explicit_correction', -1.00, false, 'record_outcome', 1, 'thread-1')$$,
    'weights: explicit_reinforcement +1.0, implicit_success +0.2, neutral_exposure 0, explicit_correction -1.0');
SELECT results_eq(
    $$SELECT r.id, r.outcome, r.weight, r.created_at FROM recorded AS r ORDER BY r.id$$,
    $$SELECT o.id, o.outcome, o.weight, o.created_at FROM prme.outcomes AS o
      WHERE o.user_id = 'oc_alice' AND o.node_id = 'a1000000-0000-4000-8000-000000000001' ORDER BY o.id$$,
    'the returned events are the stored events');
SELECT is(
    (SELECT (count(*), min(version), max(version))::text FROM prme.nodes WHERE user_id = 'oc_alice'
        AND id = 'a1000000-0000-4000-8000-000000000001'),
    '(1,1,1)', 'outcomes do not change the node (version 1)');
SELECT is(
    (SELECT count(*) FROM prme.journal WHERE user_id = 'oc_alice' AND node_id = 'a1000000-0000-4000-8000-000000000001'),
    1::bigint, 'outcomes write no journal record (only the create record)');
SELECT is(
    (SELECT count(*) FROM prme.request_keys WHERE user_id = 'oc_alice'), 0::bigint,
    'calls without request_id leave no key');

-- -----------------------------------------------------------------------------
-- 2. The summary
-- -----------------------------------------------------------------------------
SELECT results_eq(
    $$SELECT * FROM prme.outcome_summary('oc_alice', 'a1000000-0000-4000-8000-000000000001')$$,
    $$VALUES (1::bigint, 1::bigint, 1::bigint, 1::bigint, 4::bigint, 0.2::numeric, 'low', now())$$,
    'summary: one of each, score +0.2, low (a correction outweighs everything)');
SELECT lives_ok($$
    SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000005', 'implicit_success')
    FROM generate_series(1, 7);
    SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000006', 'neutral_exposure')
    FROM generate_series(1, 3);
    SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000002', 'explicit_reinforcement')
    FROM generate_series(1, 2);
$$, 'record implicit successes, neutral exposures and explicit reinforcements');
SELECT results_eq(
    $$SELECT s.explicit_reinforcements, s.implicit_successes, s.neutral_exposures, s.explicit_corrections,
             s.outcomes, s.score, s.stability_by_outcomes
      FROM unnest(ARRAY['a1000000-0000-4000-8000-000000000005', 'a1000000-0000-4000-8000-000000000006',
                        'a1000000-0000-4000-8000-000000000007', 'a1000000-0000-4000-8000-000000000002']::uuid[])
           WITH ORDINALITY AS u (id, n),
           LATERAL prme.outcome_summary('oc_alice', u.id) AS s
      ORDER BY u.n$$,
    $$VALUES (0::bigint, 7::bigint, 0::bigint, 0::bigint, 7::bigint, 1.4::numeric, 'semi-stable'),
             (0, 0, 3, 0, 3, 0, 'semi-stable'),
             (0, 0, 0, 0, 0, 0, 'semi-stable'),
             (2, 0, 0, 0, 2, 2, 'stable')$$,
    'summary: silent successes reach semi-stable at most, stable only from explicit reinforcement');
SELECT is(
    (SELECT last_outcome_at FROM prme.outcome_summary('oc_alice', 'a1000000-0000-4000-8000-000000000007')),
    NULL, 'summary of a node without outcomes: last_outcome_at is null');
SELECT throws_ok(
    $$SELECT * FROM prme.outcome_summary('oc_bob', 'a1000000-0000-4000-8000-000000000001')$$,
    'PR404', 'node not found', 'summary of another owner''s node: PR404');
SELECT is(prme._stability_by_outcomes(3, 0, 0, 0), 'stable', 'suggested: 3 explicit reinforcements -> stable');
SELECT is(prme._stability_by_outcomes(1, 20, 0, 0), 'semi-stable', 'suggested: 1 explicit + 20 implicit -> semi-stable');
SELECT is(prme._stability_by_outcomes(9, 9, 9, 1), 'low', 'suggested: any correction -> low');

-- -----------------------------------------------------------------------------
-- 3. Idempotency by request_id
-- -----------------------------------------------------------------------------
CREATE TEMP TABLE first_call AS
SELECT * FROM prme.record_outcome(
    user_id => 'oc_alice', node_id => 'a1000000-0000-4000-8000-000000000002', outcome => 'implicit_success',
    evidence_id => 'e1000000-0000-4000-8000-0000000000a1', profile_id => 'agent-7', thread_id => 't-9',
    notes => 'it worked', request_id => 'c1000000-0000-4000-8000-000000000001');
SELECT is((SELECT replayed FROM first_call), false, 'named notation: a new key records the outcome');
SELECT results_eq(
    $$SELECT operation, node_id, evidence_id, node_version, namespace FROM prme.request_keys
      WHERE user_id = 'oc_alice' AND request_id = 'c1000000-0000-4000-8000-000000000001'$$,
    $$VALUES ('record_outcome', 'a1000000-0000-4000-8000-000000000002'::uuid,
              'e1000000-0000-4000-8000-0000000000a1'::uuid, 1::bigint, 'default')$$,
    'the key is bound to record_outcome, the node, the evidence and the journal record it saw');

UPDATE mark SET fp = pg_temp.fingerprint();
SELECT results_eq(
    $$SELECT id, replayed FROM prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000002',
        'implicit_success', 'e1000000-0000-4000-8000-0000000000a1', 'agent-7', 't-9', 'it worked',
        'c1000000-0000-4000-8000-000000000001')$$,
    $$SELECT id, true FROM first_call$$,
    'same key, same arguments: the stored outcome, replayed = true');
SELECT pg_temp.unchanged('a replay writes nothing');

SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000002', 'explicit_correction',
        'e1000000-0000-4000-8000-0000000000a1', 'agent-7', 't-9', 'it worked', 'c1000000-0000-4000-8000-000000000001')$$,
    'PR409', NULL, 'same key, another outcome: PR409');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000002', 'implicit_success',
        'e1000000-0000-4000-8000-0000000000a1', 'agent-7', 't-9', 'other notes', 'c1000000-0000-4000-8000-000000000001')$$,
    'PR409', NULL, 'same key, other notes: PR409');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000002', 'implicit_success',
        'e1000000-0000-4000-8000-0000000000a1', 'agent-8', 't-9', 'it worked', 'c1000000-0000-4000-8000-000000000001')$$,
    'PR409', NULL, 'same key, another profile_id: PR409');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000002', 'implicit_success',
        'e1000000-0000-4000-8000-0000000000a1', 'agent-7', NULL, 'it worked', 'c1000000-0000-4000-8000-000000000001')$$,
    'PR409', NULL, 'same key, no thread_id: PR409');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000002', 'implicit_success',
        NULL, 'agent-7', 't-9', 'it worked', 'c1000000-0000-4000-8000-000000000001')$$,
    'PR409', NULL, 'same key, no evidence: PR409');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000001', 'implicit_success',
        'e1000000-0000-4000-8000-0000000000a1', 'agent-7', 't-9', 'it worked', 'c1000000-0000-4000-8000-000000000001')$$,
    'PR409', NULL, 'same key, another node: PR409');
SELECT throws_ok(
    $$SELECT prme.reinforce('a1000000-0000-4000-8000-000000000002', 'oc_alice',
        'e1000000-0000-4000-8000-0000000000a1', 'c1000000-0000-4000-8000-000000000001')$$,
    'PR409', NULL, 'reinforce with a key of record_outcome: PR409 (one key space)');
SELECT pg_temp.unchanged('conflicts write nothing');

SELECT lives_ok(
    $$SELECT prme.reinforce('a1000000-0000-4000-8000-000000000008', 'oc_alice', NULL,
        'c1000000-0000-4000-8000-000000000002')$$,
    'reinforce with key K2');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000008', 'explicit_reinforcement',
        request_id => 'c1000000-0000-4000-8000-000000000002')$$,
    'PR409', NULL, 'record_outcome with a key of reinforce: PR409');
SELECT is(
    (SELECT replayed FROM prme.record_outcome('oc_bob', 'b1000000-0000-4000-8000-000000000001', 'implicit_success',
        request_id => 'c1000000-0000-4000-8000-000000000001')),
    false, 'another owner''s identical key is an independent key');
SELECT is(
    (SELECT replayed FROM prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000003', 'implicit_success',
        request_id => 'c1000000-0000-4000-8000-000000000001')),
    false, 'the same key in another namespace is an independent key');

-- -----------------------------------------------------------------------------
-- 4. Not found, never forbidden
-- -----------------------------------------------------------------------------
UPDATE mark SET fp = pg_temp.fingerprint();
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-0000000000ff', 'implicit_success')$$,
    'PR404', 'node not found', 'missing node: PR404');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'b1000000-0000-4000-8000-000000000001', 'implicit_success')$$,
    'PR404', 'node not found', 'another owner''s node: PR404');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000004', 'implicit_success')$$,
    'PR404', 'node not found', 'archived node: PR404');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000004', 'implicit_success',
        request_id => 'c1000000-0000-4000-8000-000000000009')$$,
    'PR404', 'node not found', 'archived node with a new key: PR404');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000001', 'implicit_success',
        evidence_id => 'e1000000-0000-4000-8000-0000000000b1')$$,
    'PR404', 'evidence not found', 'evidence of another owner: PR404');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000001', 'implicit_success',
        evidence_id => 'e1000000-0000-4000-8000-0000000000a2')$$,
    'PR404', 'evidence not found', 'evidence of another scope: PR404');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000001', 'implicit_success',
        evidence_id => 'e1000000-0000-4000-8000-0000000000ff', request_id => 'c1000000-0000-4000-8000-000000000008')$$,
    'PR404', 'evidence not found', 'missing evidence with a key: PR404, and the key is not kept');
SELECT pg_temp.unchanged('not-found calls write nothing');

-- -----------------------------------------------------------------------------
-- 5. Invalid arguments
-- -----------------------------------------------------------------------------
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000001', 'great_success')$$,
    'PR422', NULL, 'unknown outcome: PR422');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000001', NULL)$$,
    'PR422', NULL, 'NULL outcome: PR422');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', NULL, 'implicit_success')$$,
    'PR422', 'node_id must not be null', 'NULL node_id: PR422');
SELECT throws_ok(
    $$SELECT prme.record_outcome(NULL, 'a1000000-0000-4000-8000-000000000001', 'implicit_success')$$,
    'PR422', 'user_id must not be null', 'NULL user_id: PR422');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000001', 'implicit_success',
        profile_id => E'agent\n7')$$,
    'PR422', NULL, 'profile_id with a control character: PR422');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000001', 'implicit_success',
        thread_id => repeat('t', 257))$$,
    'PR422', NULL, 'thread_id of 257 characters: PR422');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000001', 'implicit_success',
        notes => repeat('x', 65537))$$,
    'PR422', 'notes must be at most 65536 bytes', 'notes over 64 KiB: PR422');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'a1000000-0000-4000-8000-000000000001', 'implicit_success''; DROP TABLE prme.outcomes; --')$$,
    'PR422', NULL, 'SQL metacharacters in outcome: PR422, nothing run');
SELECT throws_ok(
    $$SELECT prme.record_outcome('oc_alice', 'not-a-uuid', 'implicit_success')$$,
    '22P02', NULL, 'malformed node_id: PostgreSQL''s own cast error');
SELECT pg_temp.unchanged('invalid calls write nothing');

-- -----------------------------------------------------------------------------
-- 6. reinforce's explicit_reinforcement outcome is its journal record: one when it
-- applies, none on replay, and no outcome row
-- -----------------------------------------------------------------------------
SELECT results_eq(
    $$SELECT outcome, weight, request_id, evidence_id, node_version, recorded_by
      FROM prme.node_outcomes('oc_alice', 'a1000000-0000-4000-8000-000000000008')$$,
    $$VALUES ('explicit_reinforcement', 1.00::numeric(3, 2), 'c1000000-0000-4000-8000-000000000002'::uuid,
              NULL::uuid, 2::bigint, 'reinforce')$$,
    'reinforce''s journal record is one explicit_reinforcement event with its key and the version it produced');
SELECT is(
    (SELECT replayed FROM prme.reinforce('a1000000-0000-4000-8000-000000000008', 'oc_alice', NULL,
        'c1000000-0000-4000-8000-000000000002')),
    true, 'reinforce replay');
SELECT is(
    (SELECT (count(*), (SELECT count(*) FROM prme.outcomes WHERE user_id = 'oc_alice'
        AND node_id = 'a1000000-0000-4000-8000-000000000008'))::text
     FROM prme.node_outcomes('oc_alice', 'a1000000-0000-4000-8000-000000000008')),
    '(1,0)', 'a reinforce replay appends no outcome, and no confirmation writes an outcome row');
SELECT lives_ok($$
    SELECT prme.reinforce('a1000000-0000-4000-8000-000000000008', 'oc_alice', 'e1000000-0000-4000-8000-0000000000a1');
    SELECT prme.reinforce('a1000000-0000-4000-8000-000000000008', 'oc_alice');
$$, 'two reinforces without key, one with evidence');
SELECT results_eq(
    $$SELECT evidence_id, node_version, request_id
      FROM prme.node_outcomes('oc_alice', 'a1000000-0000-4000-8000-000000000008') ORDER BY node_version$$,
    $$VALUES (NULL::uuid, 2::bigint, 'c1000000-0000-4000-8000-000000000002'::uuid),
             ('e1000000-0000-4000-8000-0000000000a1', 3, NULL),
             (NULL, 4, NULL)$$,
    'each applied reinforce appends one event: evidence and version recorded');
SELECT results_eq(
    $$SELECT explicit_reinforcements, stability_by_outcomes
      FROM prme.outcome_summary('oc_alice', 'a1000000-0000-4000-8000-000000000008')$$,
    $$VALUES (3::bigint, 'stable')$$,
    'reinforce outcomes count in the summary');
SELECT throws_ok(
    $$SELECT prme.reinforce('a1000000-0000-4000-8000-000000000004', 'oc_alice')$$,
    'PR404', NULL, 'reinforce of an archived node still PR404, no outcome');
SELECT is(
    (SELECT count(*) FROM prme.outcomes WHERE user_id = 'oc_alice'
        AND node_id = 'a1000000-0000-4000-8000-000000000004'),
    0::bigint, '... and no outcome for it');

-- -----------------------------------------------------------------------------
-- 7. Append-only events, totals equal to a rebuild, journal still verifies
-- -----------------------------------------------------------------------------
SELECT throws_ok($$UPDATE prme.outcomes SET weight = 1 WHERE user_id = 'oc_alice'$$, 'PR422', NULL,
    'outcomes refuse UPDATE');
SELECT throws_ok($$DELETE FROM prme.outcomes WHERE user_id = 'oc_alice'$$, 'PR422', NULL, 'outcomes refuse DELETE');
SELECT throws_ok($$TRUNCATE prme.outcomes CASCADE$$, 'PR422', NULL, 'outcomes refuse TRUNCATE');
SELECT throws_ok(
    $$INSERT INTO prme.outcomes (user_id, id, node_id, outcome, weight, recorded_by, node_version, created_at)
      VALUES ('oc_alice', gen_random_uuid(), 'a1000000-0000-4000-8000-000000000001', 'implicit_success', 1,
              'record_outcome', 1, now())$$,
    '23514', NULL, 'a weight that does not belong to its outcome is refused by a CHECK');
SELECT is(prme._rebuild_outcome_totals('oc_alice'), 0::bigint,
          'a set-based rebuild of the totals from the outcome rows finds nothing to change');
SELECT results_eq(
    $$SELECT n.id, n.recorded_reinforcements + n.implicit_successes + n.neutral_exposures + n.explicit_corrections
      FROM prme.nodes AS n WHERE n.user_id = 'oc_alice' ORDER BY n.id$$,
    $$SELECT n.id, count(o.id) FILTER (WHERE o.recorded_by <> 'reinforce')
      FROM prme.nodes AS n LEFT JOIN prme.outcomes AS o ON o.user_id = n.user_id AND o.node_id = n.id
      WHERE n.user_id = 'oc_alice' GROUP BY n.id ORDER BY n.id$$,
    'each memory''s totals count its outcome rows (archived and reinforced ones included)');
SELECT is_empty($$SELECT * FROM prme.verify_journal('oc_alice')$$, 'the journal of oc_alice verifies');
SELECT is(
    (SELECT matches FROM prme.replay_node('oc_alice', 'a1000000-0000-4000-8000-000000000008')), true,
    'replay_node matches for the reinforced node');

-- -----------------------------------------------------------------------------
-- 8. Tokens and overlap
-- -----------------------------------------------------------------------------
SELECT is(prme._correction_tokens('Don''t use TABS, use 4-space indents! Über-long x12345'),
          ARRAY['indents', 'long', 'space', 'tabs', 'x12345'],
          'tokens: lower-cased [a-z0-9] runs longer than 3 characters, distinct, sorted');
SELECT is(prme._correction_tokens('a bb ccc'), '{}'::text[], 'tokens: nothing longer than 3 characters');
SELECT is(prme._correction_tokens(E'\u212Aelvin kelvin KELVIN'), ARRAY['elvin', 'kelvin'],
          'tokens: runs are cut on ASCII classes before lower-casing (KELVIN SIGN is not k)');
SELECT is(prme._token_overlap(ARRAY['abcd', 'efgh'], ARRAY['abcd', 'efgh', 'ijkl', 'mnop']), 1::numeric,
          'overlap divides by the smaller set');
SELECT is(prme._token_overlap('{}', ARRAY['abcd']), 0::numeric, 'overlap with an empty set is 0');

-- Linking fixtures: token sets of known size.
--   d...01  w001..w020 (20 tokens)      message M1 shares 9 of 20 with it  -> 0.45, a match
--   d...02  v001..v009 (9 tokens)       message M2 shares 4 of 9 with it   -> 0.444, no match
SELECT lives_ok($$
    SELECT prme.add_node('lk_alice', (SELECT string_agg('w' || lpad(g::text, 3, '0'), ' ') FROM generate_series(1, 20) AS g),
                         node_id => 'd1000000-0000-4000-8000-000000000001');
    SELECT prme.add_node('lk_alice', (SELECT string_agg('v' || lpad(g::text, 3, '0'), ' ') FROM generate_series(1, 9) AS g),
                         node_id => 'd1000000-0000-4000-8000-000000000002');
    SELECT prme.add_node('lk_alice', 'Alice prefers tabs over spaces in Python', node_id => 'd1000000-0000-4000-8000-000000000003');
    SELECT prme.add_node('lk_alice', 'Alice prefers spaces in Python and tabs in Makefiles', node_id => 'd1000000-0000-4000-8000-000000000004');
    SELECT prme.add_node('lk_alice', 'Alice drinks coffee every morning', node_id => 'd1000000-0000-4000-8000-000000000005');
    SELECT prme.add_node('lk_alice', 'Alice prefers tabs over spaces in Python (archived copy)', node_id => 'd1000000-0000-4000-8000-000000000006');
    SELECT prme.archive_node('lk_alice', 'd1000000-0000-4000-8000-000000000006');
    SELECT prme.add_node('lk_bob', 'Alice prefers tabs over spaces in Python', node_id => 'd1000000-0000-4000-8000-0000000000b1');
$$, 'linking fixtures');

CREATE TEMP TABLE msg AS
SELECT
    (SELECT string_agg('w' || lpad(g::text, 3, '0'), ' ') FROM generate_series(1, 9) AS g) || ' '
    || (SELECT string_agg('x' || lpad(g::text, 3, '0'), ' ') FROM generate_series(1, 11) AS g) AS m1,
    (SELECT string_agg('v' || lpad(g::text, 3, '0'), ' ') FROM generate_series(1, 4) AS g) || ' '
    || (SELECT string_agg('z' || lpad(g::text, 3, '0'), ' ') FROM generate_series(1, 5) AS g) AS m2;
SELECT is(prme._token_overlap(prme._correction_tokens((SELECT m1 FROM msg)),
                              prme._correction_tokens((SELECT content FROM prme.nodes
                                  WHERE id = 'd1000000-0000-4000-8000-000000000001'))),
          0.45::numeric, 'M1 overlaps node 01 by exactly 9/20 = 0.45');

SELECT results_eq(
    $$SELECT status, node_id, inbox_id IS NULL, matches FROM prme.link_correction('lk_alice', (SELECT m1 FROM msg),
        ARRAY['d1000000-0000-4000-8000-000000000001', 'd1000000-0000-4000-8000-000000000002']::uuid[], 'th-1')$$,
    $$VALUES ('linked', 'd1000000-0000-4000-8000-000000000001'::uuid, true,
              '[{"node_id": "d1000000-0000-4000-8000-000000000001", "overlap": 0.45}]'::jsonb)$$,
    'overlap exactly 0.45 matches: the one match is linked');
SELECT results_eq(
    $$SELECT outcome, weight, thread_id, notes, recorded_by FROM prme.outcomes
      WHERE user_id = 'lk_alice' AND node_id = 'd1000000-0000-4000-8000-000000000001'$$,
    $$SELECT 'explicit_correction', -1.00::numeric(3, 2), 'th-1', m1, 'link_correction' FROM msg$$,
    'the link appended one explicit_correction event with the thread and the message');
SELECT results_eq(
    $$SELECT status, node_id, matches FROM prme.link_correction('lk_alice', (SELECT m2 FROM msg),
        ARRAY['d1000000-0000-4000-8000-000000000002']::uuid[])$$,
    $$VALUES ('unmatched', NULL::uuid, '[]'::jsonb)$$,
    'overlap 4/9 < 0.45 does not match: unmatched');

UPDATE mark SET fp = (SELECT count(*) FROM prme.outcomes WHERE user_id = 'lk_alice')::text;
CREATE TEMP TABLE ambiguous AS
SELECT * FROM prme.link_correction('lk_alice', 'Actually Alice uses spaces in Python now',
    ARRAY['d1000000-0000-4000-8000-000000000003', 'd1000000-0000-4000-8000-000000000004',
          'd1000000-0000-4000-8000-000000000005']::uuid[]);
SELECT results_eq(
    $$SELECT status, node_id, outcome_id, inbox_id IS NOT NULL, jsonb_array_length(matches) FROM ambiguous$$,
    $$VALUES ('ambiguous', NULL::uuid, NULL::uuid, true, 2)$$,
    'two matches: ambiguous, nothing linked, an inbox entry');
SELECT results_eq(
    $$SELECT i.reason, i.matched_node_ids, i.resolution FROM prme.correction_inbox AS i
      WHERE i.user_id = 'lk_alice' AND i.id = (SELECT inbox_id FROM ambiguous)$$,
    $$VALUES ('ambiguous', ARRAY['d1000000-0000-4000-8000-000000000003',
                                 'd1000000-0000-4000-8000-000000000004']::uuid[], NULL::text)$$,
    'the inbox keeps the matches (best first)');
SELECT is((SELECT count(*) FROM prme.outcomes WHERE user_id = 'lk_alice')::text, (SELECT fp FROM mark),
          'an ambiguous correction appends no outcome');
SELECT results_eq(
    $$SELECT status, node_id FROM prme.link_correction('lk_alice', 'Actually Alice uses spaces in Python now',
        ARRAY['d1000000-0000-4000-8000-000000000006', 'd1000000-0000-4000-8000-0000000000b1',
              'd1000000-0000-4000-8000-000000000005']::uuid[])$$,
    $$VALUES ('unmatched', NULL::uuid)$$,
    'archived and foreign candidates do not count (only active memories of the owner)');
SELECT results_eq(
    $$SELECT status, node_id FROM prme.link_correction('lk_alice', 'Actually Alice uses spaces in Python now',
        ARRAY['d1000000-0000-4000-8000-000000000003', 'd1000000-0000-4000-8000-000000000006',
              'd1000000-0000-4000-8000-0000000000b1', 'd1000000-0000-4000-8000-000000000005']::uuid[])$$,
    $$VALUES ('linked', 'd1000000-0000-4000-8000-000000000003'::uuid)$$,
    'one active match among ignored candidates: linked');
SELECT is((SELECT count(*) FROM prme.outcomes WHERE user_id = 'lk_bob'), 0::bigint,
          'nothing is appended to another owner''s memory');
SELECT results_eq(
    $$SELECT status FROM prme.link_correction('lk_alice', 'No, wrong.', '{}'::uuid[])$$,
    $$VALUES ('unmatched')$$, 'no candidates: unmatched');
SELECT throws_ok($$SELECT * FROM prme.link_correction('lk_alice', 'x', NULL)$$, 'PR422', NULL,
                 'NULL candidates: PR422');
SELECT throws_ok(
    $$SELECT * FROM prme.link_correction('lk_alice', 'x', array_fill(gen_random_uuid(), ARRAY[1001]))$$,
    'PR422', NULL, 'more than 1000 candidates: PR422');
SELECT throws_ok($$SELECT * FROM prme.link_correction('lk_alice', '  ', '{}'::uuid[])$$, 'PR422', NULL,
                 'blank message: PR422');

-- -----------------------------------------------------------------------------
-- 9. The inbox
-- -----------------------------------------------------------------------------
SELECT is((SELECT count(*) FROM prme.list_correction_inbox('lk_alice')), 4::bigint,
          'list_correction_inbox: the open entries');
SELECT results_eq(
    $$SELECT resolution, resolved_node_id FROM prme.resolve_correction('lk_alice', (SELECT inbox_id FROM ambiguous),
        'd1000000-0000-4000-8000-000000000004')$$,
    $$VALUES ('linked', 'd1000000-0000-4000-8000-000000000004'::uuid)$$,
    'resolve_correction links the entry to the chosen memory');
SELECT results_eq(
    $$SELECT o.outcome, o.recorded_by, o.notes FROM prme.outcomes AS o
      WHERE o.user_id = 'lk_alice' AND o.node_id = 'd1000000-0000-4000-8000-000000000004'$$,
    $$VALUES ('explicit_correction', 'resolve_correction', 'Actually Alice uses spaces in Python now')$$,
    '... appending the explicit_correction outcome');
SELECT is(
    (SELECT outcome_id FROM prme.resolve_correction('lk_alice', (SELECT inbox_id FROM ambiguous),
        'd1000000-0000-4000-8000-000000000004')),
    (SELECT id FROM prme.outcomes WHERE user_id = 'lk_alice' AND node_id = 'd1000000-0000-4000-8000-000000000004'),
    'resolving again the same way is a no-op');
SELECT is((SELECT count(*) FROM prme.outcomes WHERE user_id = 'lk_alice'
              AND node_id = 'd1000000-0000-4000-8000-000000000004'), 1::bigint, '... with no second outcome');
SELECT throws_ok(
    $$SELECT prme.resolve_correction('lk_alice', (SELECT inbox_id FROM ambiguous), NULL)$$,
    'PR409', NULL, 'resolving otherwise: PR409');
SELECT throws_ok(
    $$SELECT prme.resolve_correction('lk_bob', (SELECT inbox_id FROM ambiguous), NULL)$$,
    'PR404', 'inbox entry not found', 'another owner''s entry: PR404');
SELECT throws_ok(
    $$SELECT prme.resolve_correction('lk_alice',
        (SELECT id FROM prme.correction_inbox WHERE user_id = 'lk_alice' AND resolution IS NULL ORDER BY created_at, id LIMIT 1),
        'd1000000-0000-4000-8000-000000000006')$$,
    'PR404', 'node not found', 'linking to an archived memory: PR404');
SELECT results_eq(
    $$SELECT resolution, resolved_node_id, outcome_id FROM prme.resolve_correction('lk_alice',
        (SELECT id FROM prme.correction_inbox WHERE user_id = 'lk_alice' AND resolution IS NULL ORDER BY created_at, id LIMIT 1))$$,
    $$VALUES ('dismissed', NULL::uuid, NULL::uuid)$$,
    'resolve_correction without node_id dismisses');
SELECT is((SELECT count(*) FROM prme.list_correction_inbox('lk_alice')), 2::bigint,
          'resolved entries leave the open list');
SELECT is((SELECT count(*) FROM prme.list_correction_inbox('lk_alice', include_resolved => true)), 4::bigint,
          '... and stay listed with include_resolved');
SELECT is((SELECT count(*) FROM prme.list_correction_inbox('lk_bob')), 0::bigint, 'inboxes are per owner');

-- -----------------------------------------------------------------------------
-- 10. is_correction
-- -----------------------------------------------------------------------------
SELECT ok(prme.is_correction(m), format('correction: %s', m))
FROM unnest(ARRAY[
    'Don''t use tabs in Python.',
    'don’t suggest that again',
    'Please do not book morning flights',
    'No, I moved to Berlin last year',
    'Nope. It is Thursday.',
    'Actually, my name is Sam',
    'Thanks! Actually I prefer tea',
    'Stop adding emojis',
    'I prefer spaces over tabs',
    'I prefer tea rather than coffee',
    'Never schedule meetings on Friday',
    'Always answer in German',
    'You should never use my work email',
    'That''s wrong, the deadline is May 3',
    'I told you I am vegetarian',
    'I prefer pytest to unittest',
    'Favour composition over inheritance',
    'Use pathlib instead',
    'From now on, reply in German',
    E'Looks good\ndon''t push to main directly'
]) AS m;
SELECT ok(NOT prme.is_correction(m), format('not a correction: %s', m))
FROM unnest(ARRAY[
    'What is the weather in Berlin?',
    'Thanks, that looks great',
    'I prefer to travel by train',
    'Nobody knows the answer',
    'Can you stop by the office tomorrow? I am not sure',
    'Don Quixote is a novel',
    'The result is actually good',
    'Is there another way?',
    '',
    'Never mind, that''s fine',
    'Don''t worry about it',
    'No.',
    'We used the old build instead'
]) AS m;
SELECT is(prme.is_correction(NULL), false, 'is_correction(NULL) is false');
SELECT status FROM prme.link_correction('lk_alice', 'Stop that, twice', ARRAY[
    'd1000000-0000-4000-8000-000000000002', 'd1000000-0000-4000-8000-000000000001',
    'd1000000-0000-4000-8000-000000000002']::uuid[]);
SELECT is(
    (SELECT candidate_node_ids FROM prme.correction_inbox WHERE user_id = 'lk_alice' AND message = 'Stop that, twice'),
    ARRAY['d1000000-0000-4000-8000-000000000002', 'd1000000-0000-4000-8000-000000000001']::uuid[],
    'a candidate listed twice counts once: the inbox keeps the distinct ids, in the order first listed');

SELECT * FROM finish();
ROLLBACK;

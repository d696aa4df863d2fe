-- =============================================================================
-- test_maintenance.sql: settings, the maintenance report, decay, reviews and
-- patches (issue 7, items 3 to 5; docs/MAINTENANCE.md).
--
-- Proves: the default cadences and decay amounts and per-owner overrides (the
-- '*' defaults are not writable through the API); every report rule with its
-- thresholds (corrections, contested, explicit and implicit promotion, neutral
-- exposure, review_due) and that the report writes nothing; decay per overdue
-- cycle with its boundaries (first cycle at next_review_at, one more per full
-- cadence), amounts per stability, the floor at 0, the permanent profile, the
-- schedule of memories without next_review_at; outcomes after as_of are left
-- out; patches carry the ops of the rules with risk, review and default flags;
-- auto mode applies decay and review-free increases only, manual mode exactly the
-- selected ops; each op applies once; decay is idempotent per cycle; a review
-- (mark_reviewed or an applied stability change) resets the cadence and settles
-- the outcomes seen; stale ops change nothing; bad calls raise PR404/PR422; every
-- applied op is a journal record that verifies and replays.
--
-- Everything runs in one transaction, so now() is one instant T throughout;
-- schedules are placed relative to it. Fixed ids: a2000000-...-0000000000NN
-- report memories of mt_alice, f2000000-... patch memories of mt_patch.
-- =============================================================================
BEGIN;
SELECT plan(84);

-- Everything maintenance could change, summarised in one text.
CREATE FUNCTION pg_temp.fingerprint(p_user text) RETURNS text LANGUAGE sql AS $$
    SELECT md5(concat_ws('#',
        (SELECT string_agg(n.ctid::text || n.version || n.confidence_base || n.stability || n.lifecycle_state
                           || coalesce(n.next_review_at::text, '-'), '|' ORDER BY n.id)
         FROM prme.nodes AS n WHERE n.user_id = p_user),
        (SELECT count(*) FROM prme.journal AS j WHERE j.user_id = p_user),
        (SELECT string_agg(concat_ws(',', n.recorded_reinforcements, n.implicit_successes, n.neutral_exposures,
                                     n.explicit_corrections, n.last_outcome_at, n.reviewed_explicit_reinforcements,
                                     n.reviewed_implicit_successes, n.reviewed_neutral_exposures,
                                     n.reviewed_explicit_corrections, n.reviewed_at, n.decay_anchor, n.decay_cycles),
                           '|' ORDER BY n.id)
         FROM prme.nodes AS n WHERE n.user_id = p_user)
    ))
$$;
CREATE TEMP TABLE mark (fp text);
INSERT INTO mark VALUES (NULL);

-- A memory with any creation time (add_node always creates at now()), with a
-- genuine create record so the journal verifies.
CREATE FUNCTION pg_temp.seed_node(
    p_user text, p_id uuid, p_stability text, p_confidence numeric, p_created timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v prme.nodes;
    e prme.journal;
BEGIN
    v.id := p_id; v.user_id := p_user; v.namespace := 'default'; v.scope := 'personal'; v.kind := 'fact';
    v.content := 'seeded'; v.confidence_base := p_confidence; v.salience_base := 0.5; v.reinforcement_boost := 0;
    v.evidence_refs := '{}'; v.stability := p_stability; v.lifecycle_state := 'active'; v.decay_profile := 'medium';
    v.created_at := p_created; v.updated_at := p_created; v.version := 1;
    e := prme._journal_entry('create', NULL, gen_random_uuid(), NULL, NULL, NULL, v);
    INSERT INTO prme.nodes (id, user_id, namespace, scope, kind, content, confidence_base, salience_base,
        reinforcement_boost, last_reinforced_at, evidence_refs, stability, next_review_at, lifecycle_state,
        decay_profile, created_at, updated_at, version, last_checksum)
    VALUES (v.id, v.user_id, v.namespace, v.scope, v.kind, v.content, v.confidence_base, v.salience_base,
        v.reinforcement_boost, v.last_reinforced_at, v.evidence_refs, v.stability, v.next_review_at,
        v.lifecycle_state, v.decay_profile, v.created_at, v.updated_at, v.version, e.checksum);
    INSERT INTO prme.journal SELECT e.*;
END;
$$;

-- n outcomes of one kind on one memory.
CREATE FUNCTION pg_temp.outcomes(p_user text, p_node uuid, p_outcome text, n integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        PERFORM prme.record_outcome(p_user, p_node, p_outcome);
    END LOOP;
END;
$$;

-- -----------------------------------------------------------------------------
-- 1. Settings
-- -----------------------------------------------------------------------------
SELECT results_eq(
    $$SELECT * FROM prme.get_maintenance_settings('mt_set') ORDER BY review_cadence$$,
    $$VALUES ('low', interval '7 days', 0.15::numeric, 'default'),
             ('semi-stable', interval '30 days', 0.15, 'default'),
             ('stable', interval '90 days', 0.05, 'default')$$,
    'defaults: low 7 days -0.15, semi-stable 30 days -0.15, stable 90 days -0.05');
SELECT results_eq(
    $$SELECT * FROM prme.set_maintenance_setting('mt_set', 'low', interval '3 days', 0.2) ORDER BY review_cadence$$,
    $$VALUES ('low', interval '3 days', 0.2::numeric, 'owner'),
             ('semi-stable', interval '30 days', 0.15, 'default'),
             ('stable', interval '90 days', 0.05, 'default')$$,
    'an owner overrides one stability; the others stay default');
SELECT is((SELECT review_cadence FROM prme.get_maintenance_settings('mt_other') WHERE stability = 'low'),
          interval '7 days', 'another owner keeps the default');
SELECT throws_ok($$SELECT prme.set_maintenance_setting('*', 'low', interval '1 day', 0.1)$$, 'PR422', NULL,
                 'the defaults (user_id *) are not writable through the API');
SELECT throws_ok($$SELECT prme.set_maintenance_setting('mt_set', 'low', interval '1 month', 0.1)$$, 'PR422', NULL,
                 'a cadence in months: PR422 (months have no fixed length)');
SELECT throws_ok($$SELECT prme.set_maintenance_setting('mt_set', 'low', interval '30 minutes', 0.1)$$, 'PR422', NULL,
                 'a cadence under an hour: PR422');
SELECT throws_ok($$SELECT prme.set_maintenance_setting('mt_set', 'low', NULL, 0.1)$$, 'PR422', NULL,
                 'a NULL cadence: PR422');
SELECT throws_ok($$SELECT prme.set_maintenance_setting('mt_set', 'high', interval '1 day', 0.1)$$, 'PR422', NULL,
                 'an unknown stability: PR422');
SELECT throws_ok($$SELECT prme.set_maintenance_setting('mt_set', 'low', interval '1 day', 1.5)$$, 'PR422', NULL,
                 'decay over 1: PR422');
SELECT is((SELECT count(*) FROM prme.reset_maintenance_settings('mt_set') WHERE source = 'default'), 3::bigint,
          'reset_maintenance_settings restores the defaults');

-- -----------------------------------------------------------------------------
-- 2. Report rules from outcomes
-- -----------------------------------------------------------------------------
SELECT lives_ok($$
    SELECT prme.add_node('mt_alice', 'stable, 1 correction', stability => 'stable',
                         node_id => 'a2000000-0000-4000-8000-000000000001');
    SELECT prme.add_node('mt_alice', 'semi-stable, 1 correction', stability => 'semi-stable',
                         node_id => 'a2000000-0000-4000-8000-000000000002');
    SELECT prme.add_node('mt_alice', 'low, 1 correction', node_id => 'a2000000-0000-4000-8000-000000000003');
    SELECT prme.add_node('mt_alice', 'stable, 2 corrections', stability => 'stable',
                         node_id => 'a2000000-0000-4000-8000-000000000004');
    SELECT prme.add_node('mt_alice', 'low, 2 explicit', node_id => 'a2000000-0000-4000-8000-000000000005');
    SELECT prme.add_node('mt_alice', 'semi-stable, 2 explicit', stability => 'semi-stable',
                         node_id => 'a2000000-0000-4000-8000-000000000006');
    SELECT prme.add_node('mt_alice', 'stable, 3 explicit', stability => 'stable',
                         node_id => 'a2000000-0000-4000-8000-000000000007');
    SELECT prme.add_node('mt_alice', 'low, 2 explicit and a correction', node_id => 'a2000000-0000-4000-8000-000000000008');
    SELECT prme.add_node('mt_alice', 'low, 5 implicit', node_id => 'a2000000-0000-4000-8000-000000000009');
    SELECT prme.add_node('mt_alice', 'low, 4 implicit', node_id => 'a2000000-0000-4000-8000-000000000010');
    SELECT prme.add_node('mt_alice', 'semi-stable, 6 implicit', stability => 'semi-stable',
                         node_id => 'a2000000-0000-4000-8000-000000000011');
    SELECT prme.add_node('mt_alice', 'low, 5 implicit and 2 explicit', node_id => 'a2000000-0000-4000-8000-000000000012');
    SELECT prme.add_node('mt_alice', 'low, 10 neutral', node_id => 'a2000000-0000-4000-8000-000000000013');
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000001', 'explicit_correction', 1);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000002', 'explicit_correction', 1);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000003', 'explicit_correction', 1);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000004', 'explicit_correction', 2);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000005', 'explicit_reinforcement', 2);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000006', 'explicit_reinforcement', 2);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000007', 'explicit_reinforcement', 3);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000008', 'explicit_reinforcement', 2);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000008', 'explicit_correction', 1);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000009', 'implicit_success', 5);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000010', 'implicit_success', 4);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000011', 'implicit_success', 6);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000012', 'implicit_success', 5);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000012', 'explicit_reinforcement', 2);
    SELECT pg_temp.outcomes('mt_alice', 'a2000000-0000-4000-8000-000000000013', 'neutral_exposure', 10);
$$, 'fixtures: thirteen memories and their outcomes (none due: no schedule, created at T)');

UPDATE mark SET fp = pg_temp.fingerprint('mt_alice');
CREATE TEMP TABLE report AS SELECT * FROM prme.maintenance_report('mt_alice');
SELECT is(pg_temp.fingerprint('mt_alice'), (SELECT fp FROM mark), 'the report changes nothing');
SELECT results_eq(
    $$SELECT right(node_id::text, 2), recommendations, stability, suggested_stability FROM report ORDER BY node_id$$,
    $$VALUES ('01', ARRAY['review_memory', 'decrease_stability'], 'stable', 'semi-stable'),
             ('02', ARRAY['review_memory', 'decrease_stability'], 'semi-stable', 'low'),
             ('03', ARRAY['review_memory'], 'low', NULL),
             ('04', ARRAY['review_memory', 'decrease_stability', 'mark_contested'], 'stable', 'semi-stable'),
             ('05', ARRAY['increase_stability'], 'low', 'semi-stable'),
             ('06', ARRAY['increase_stability'], 'semi-stable', 'stable'),
             ('08', ARRAY['review_memory'], 'low', NULL),
             ('09', ARRAY['flag_for_review'], 'low', 'semi-stable'),
             ('12', ARRAY['increase_stability'], 'low', 'semi-stable')$$,
    'every outcome rule: corrections lower (review), 2 contest, 2 explicit raise one step, 5 silent successes '
    'flag at most semi-stable, 4 do nothing, neutral exposure does nothing');
SELECT results_eq(
    $$SELECT explicit_reinforcements, implicit_successes, explicit_corrections, overdue_cycles, decayed_cycles
      FROM report WHERE right(node_id::text, 2) = '08'$$,
    $$VALUES (2::bigint, 0::bigint, 1::bigint, 0, 0)$$,
    'report rows carry the counts and the schedule behind them');
SELECT is_empty(
    $$SELECT * FROM prme.maintenance_report('mt_alice', now() - interval '1 second')$$,
    'outcomes recorded after as_of are left out');
SELECT is_empty($$SELECT * FROM prme.maintenance_report('mt_bob')$$, 'another owner''s report is empty');
SELECT throws_ok($$SELECT * FROM prme.maintenance_report(NULL)$$, 'PR422', NULL, 'report with NULL user_id: PR422');
SELECT throws_ok($$SELECT * FROM prme.maintenance_report('mt_alice', 'infinity')$$, 'PR422', NULL,
                 'report as of infinity: PR422');

-- -----------------------------------------------------------------------------
-- 3. Due dates and decay in the report
-- -----------------------------------------------------------------------------
SELECT lives_ok($$
    SELECT prme.add_node('mt_due', 'low, due one cadence ago', next_review_at => now() - interval '7 days',
                         node_id => 'a2000000-0000-4000-8000-000000000021');
    SELECT prme.add_node('mt_due', 'semi-stable, due a second ago', stability => 'semi-stable',
                         next_review_at => now() - interval '1 second', node_id => 'a2000000-0000-4000-8000-000000000022');
    SELECT prme.add_node('mt_due', 'stable, due 180 days ago', stability => 'stable', confidence_base => 0.9,
                         next_review_at => now() - interval '180 days', node_id => 'a2000000-0000-4000-8000-000000000023');
    SELECT prme.add_node('mt_due', 'low, due 30 days ago, little confidence', confidence_base => 0.2,
                         next_review_at => now() - interval '30 days', node_id => 'a2000000-0000-4000-8000-000000000024');
    SELECT prme.add_node('mt_due', 'permanent, due', decay_profile => 'permanent',
                         next_review_at => now() - interval '30 days', node_id => 'a2000000-0000-4000-8000-000000000025');
    SELECT prme.add_node('mt_due', 'archived, due', next_review_at => now() - interval '30 days',
                         node_id => 'a2000000-0000-4000-8000-000000000026');
    SELECT prme.archive_node('mt_due', 'a2000000-0000-4000-8000-000000000026');
    SELECT prme.add_node('mt_due', 'due in a second', next_review_at => now() + interval '1 second',
                         node_id => 'a2000000-0000-4000-8000-000000000027');
$$, 'fixtures: memories with review schedules around T');
SELECT results_eq(
    $$SELECT right(node_id::text, 2), recommendations, confidence_base, suggested_confidence, decayed_cycles,
             overdue_cycles
      FROM prme.maintenance_report('mt_due') ORDER BY node_id$$,
    $$VALUES ('21', ARRAY['decay_confidence', 'review_due'], 0.5::numeric, 0.2::numeric, 0, 2),
             ('22', ARRAY['decay_confidence', 'review_due'], 0.5, 0.35, 0, 1),
             ('23', ARRAY['decay_confidence', 'review_due'], 0.9, 0.75, 0, 3),
             ('24', ARRAY['decay_confidence', 'review_due'], 0.2, 0, 0, 5),
             ('25', ARRAY['review_due'], 0.5, NULL, 0, 5)$$,
    'decay per overdue cycle: low -0.15 (2 cycles at one cadence overdue), semi-stable -0.15, stable -0.05 '
    '(3 cycles at 180 days), floored at 0; review_due without decay for the permanent profile; nothing for '
    'archived or not yet due memories');
SELECT results_eq(
    $$SELECT right(r.node_id::text, 2), r.next_review_at FROM prme.maintenance_report('mt_due') AS r ORDER BY 1$$,
    $$SELECT right(id::text, 2), next_review_at FROM prme.nodes
      WHERE user_id = 'mt_due' AND lifecycle_state = 'active' AND next_review_at <= now() ORDER BY 1$$,
    'exactly the active memories whose next_review_at has passed are due');
SELECT results_eq(
    $$SELECT t.label, r.overdue_cycles
      FROM (VALUES ('at next_review_at', 1, now() + interval '1 second'),
                   ('a cadence later less 1 microsecond', 2, now() + interval '1 second' + interval '7 days'
                                                              - interval '1 microsecond'),
                   ('a cadence later', 3, now() + interval '1 second' + interval '7 days')) AS t (label, n, at),
           LATERAL prme.maintenance_report('mt_due', t.at) AS r
      WHERE right(r.node_id::text, 2) = '27' ORDER BY t.n$$,
    $$VALUES ('at next_review_at', 1), ('a cadence later less 1 microsecond', 1), ('a cadence later', 2)$$,
    'cycle boundaries: the first decay is due at next_review_at, one more per full cadence');
SELECT is(
    (SELECT count(*) FROM prme.maintenance_report('mt_due', now() + interval '1 second' - interval '1 microsecond')
     WHERE right(node_id::text, 2) = '27'),
    0::bigint, '... and nothing a microsecond before next_review_at');
SELECT lives_ok($$
    SELECT pg_temp.seed_node('mt_due', 'a2000000-0000-4000-8000-000000000028', 'low', 0.5, now() - interval '400 days');
$$, 'fixture: a memory without next_review_at, created 400 days before T');
SELECT is_empty(
    $$SELECT * FROM prme.maintenance_report('mt_due', now() + interval '1000 days')
      WHERE right(node_id::text, 2) = '28'$$,
    'a memory without next_review_at has no review schedule: never due');
SELECT lives_ok($$SELECT prme.reinforce('a2000000-0000-4000-8000-000000000028', 'mt_due')$$,
                'a confirmation ...');
SELECT is_empty(
    $$SELECT * FROM prme.maintenance_report('mt_due', now() + interval '1000 days')
      WHERE right(node_id::text, 2) = '28'$$,
    '... does not schedule it');
SELECT is(
    (SELECT next_review_at FROM prme.mark_reviewed('mt_due', 'a2000000-0000-4000-8000-000000000028')),
    now() + interval '168 hours', 'a review schedules it one cadence ahead (low: 7 days)');
SELECT results_eq(
    $$SELECT recommendations, overdue_cycles FROM prme.maintenance_report('mt_due', now() + interval '168 hours')
      WHERE right(node_id::text, 2) = '28'$$,
    $$VALUES (ARRAY['decay_confidence', 'review_due'], 1)$$,
    '... and then it is due when that cadence has passed');
SELECT lives_ok(
    $$SELECT prme.set_maintenance_setting('mt_due', 'low', interval '1 day', 0.5)$$,
    'an owner''s own cadence and decay for low memories');
SELECT results_eq(
    $$SELECT overdue_cycles, suggested_confidence FROM prme.maintenance_report('mt_due')
      WHERE right(node_id::text, 2) = '21'$$,
    $$VALUES (8, 0::numeric)$$,
    'the owner''s settings apply: 7 days overdue at a 1-day cadence is 8 cycles of -0.5');

-- -----------------------------------------------------------------------------
-- 4. Patches
-- -----------------------------------------------------------------------------
SELECT lives_ok($$
    SELECT prme.add_node('mt_patch', 'stable, 2 corrections, due 90 days ago', stability => 'stable',
                         confidence_base => 0.8, next_review_at => now() - interval '90 days',
                         node_id => 'f2000000-0000-4000-8000-000000000001');
    SELECT prme.add_node('mt_patch', 'low, 2 explicit', node_id => 'f2000000-0000-4000-8000-000000000002');
    SELECT prme.add_node('mt_patch', 'low, 5 implicit', node_id => 'f2000000-0000-4000-8000-000000000003');
    SELECT prme.add_node('mt_patch', 'semi-stable, due a day ago', stability => 'semi-stable',
                         next_review_at => now() - interval '1 day', node_id => 'f2000000-0000-4000-8000-000000000004');
    SELECT pg_temp.outcomes('mt_patch', 'f2000000-0000-4000-8000-000000000001', 'explicit_correction', 2);
    SELECT pg_temp.outcomes('mt_patch', 'f2000000-0000-4000-8000-000000000002', 'explicit_reinforcement', 2);
    SELECT pg_temp.outcomes('mt_patch', 'f2000000-0000-4000-8000-000000000003', 'implicit_success', 5);
$$, 'fixtures: four memories for a patch');

UPDATE mark SET fp = pg_temp.fingerprint('mt_patch');
CREATE TEMP TABLE patch1 AS SELECT * FROM prme.maintenance_patch('mt_patch');
SELECT is(pg_temp.fingerprint('mt_patch'), (SELECT fp FROM mark), 'a patch changes no memory');
SELECT results_eq(
    $$SELECT o ->> 'op_id', o ->> 'op', o ->> 'recommendation', right(o -> 'target' ->> 'node_id', 2), o ->> 'risk',
             (o ->> 'requires_review')::boolean, (o ->> 'default_selected')::boolean, o ->> 'status'
      FROM patch1, jsonb_array_elements(patch1.ops) AS o$$,
    $$VALUES ('op_001', 'decay_confidence', 'decay_confidence', '01', 'low', false, true, 'pending'),
             ('op_002', 'update_stability', 'decrease_stability', '01', 'medium', true, true, 'pending'),
             ('op_003', 'mark_contested', 'mark_contested', '01', 'high', true, false, 'pending'),
             ('op_004', 'update_stability', 'increase_stability', '02', 'low', false, true, 'pending'),
             ('op_005', 'update_stability', 'flag_for_review', '03', 'medium', true, false, 'pending'),
             ('op_006', 'decay_confidence', 'decay_confidence', '04', 'low', false, true, 'pending')$$,
    'the patch: numbered ops by memory, with op, risk, requires_review and default_selected per rule');
SELECT results_eq(
    $$SELECT o -> 'updates' FROM patch1, jsonb_array_elements(patch1.ops) AS o
      WHERE o ->> 'op_id' IN ('op_001', 'op_002', 'op_003') ORDER BY o ->> 'op_id'$$,
    $$VALUES ('{"confidence_base": {"from": 0.8, "to": 0.7}, "decay_cycles": {"from": 0, "to": 2}}'::jsonb),
             ('{"stability": {"from": "stable", "to": "semi-stable"}}'),
             ('{"lifecycle_state": {"from": "active", "to": "contested"}}')$$,
    'updates say exactly what changes, from and to');
SELECT results_eq(
    $$SELECT patch_id, created_at, as_of, ops FROM prme.get_patch('mt_patch', (SELECT patch_id FROM patch1))$$,
    $$SELECT patch_id, created_at, as_of, ops FROM patch1$$,
    'get_patch returns the stored patch');
SELECT is((SELECT created_at FROM patch1), now(), 'created_at of the patch');

-- auto: decay ops and increases that need no review, nothing else
CREATE TEMP TABLE auto1 AS
SELECT * FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch1), mode => 'auto');
SELECT results_eq(
    $$SELECT op_id, op, status, node_version FROM auto1$$,
    $$VALUES ('op_001', 'decay_confidence', 'applied', 2::bigint),
             ('op_004', 'update_stability', 'applied', 2),
             ('op_006', 'decay_confidence', 'applied', 2)$$,
    'auto mode applies the decay ops and the review-free increase, never a decrease, flag or mark_contested');
SELECT results_eq(
    $$SELECT right(id::text, 2), stability::text, confidence_base::numeric(5, 4), lifecycle_state::text, next_review_at
      FROM prme.nodes
      WHERE user_id = 'mt_patch' ORDER BY id$$,
    $$VALUES ('01', 'stable', 0.7::numeric(5, 4), 'active', now() - interval '90 days'),
             ('02', 'semi-stable', 0.5, 'active', now() + interval '720 hours'),
             ('03', 'low', 0.5, 'active', now() + interval '7 days'),  -- on low's cadence since created
             ('04', 'semi-stable', 0.35, 'active', now() - interval '1 day')$$,
    'decay lowered confidence; the increase reset the cadence (30 days of the new stability)');
SELECT results_eq(
    $$SELECT j.op, j.node_version::bigint, j.operation_id, j.record::jsonb ->> 'policy'
      FROM prme.journal AS j JOIN prme.patch_ops AS o
        ON o.user_id = j.user_id AND o.node_id = j.node_id AND o.applied_version = j.node_version
      WHERE j.user_id = 'mt_patch' AND o.patch_id = (SELECT patch_id FROM patch1) ORDER BY o.op_no$$,
    $$SELECT o.op, o.applied_version, o.operation_id, 'maintenance_v1' FROM prme.patch_ops AS o
      WHERE o.user_id = 'mt_patch' AND o.patch_id = (SELECT patch_id FROM patch1) AND o.applied_at IS NOT NULL
      ORDER BY o.op_no$$,
    'each applied op is one journal record with the op''s operation_id and policy maintenance_v1');

UPDATE mark SET fp = pg_temp.fingerprint('mt_patch');
SELECT results_eq(
    $$SELECT op_id, status, node_version FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch1), mode => 'auto')$$,
    $$VALUES ('op_001', 'already_applied', 2::bigint), ('op_004', 'already_applied', 2),
             ('op_006', 'already_applied', 2)$$,
    'applying again: already_applied');
SELECT is(pg_temp.fingerprint('mt_patch'), (SELECT fp FROM mark), '... and nothing is written twice');

-- manual: exactly the selected ops
SELECT results_eq(
    $$SELECT op_id, op, status FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch1),
                                                    ARRAY['op_002', 'op_002'])$$,
    $$VALUES ('op_002', 'update_stability', 'applied')$$,
    'manual mode applies exactly the selected op (listed twice, applied once)');
SELECT results_eq(
    $$SELECT stability::text, lifecycle_state::text, next_review_at, version::bigint FROM prme.nodes
      WHERE user_id = 'mt_patch' AND id = 'f2000000-0000-4000-8000-000000000001'$$,
    $$VALUES ('semi-stable', 'active', now() + interval '720 hours', 3::bigint)$$,
    'the reviewed decrease: stable -> semi-stable, cadence restarted, mark_contested not applied');
SELECT results_eq(
    $$SELECT o ->> 'op_id', o ->> 'status', o ->> 'applied_mode' FROM prme.get_patch('mt_patch', (SELECT patch_id FROM patch1)) AS p,
             jsonb_array_elements(p.ops) AS o$$,
    $$VALUES ('op_001', 'applied', 'auto'), ('op_002', 'applied', 'manual'), ('op_003', 'pending', NULL),
             ('op_004', 'applied', 'auto'), ('op_005', 'pending', NULL), ('op_006', 'applied', 'auto')$$,
    'get_patch shows what was applied, when and how');

-- a second run in the same cycle
CREATE TEMP TABLE patch2 AS SELECT * FROM prme.maintenance_patch('mt_patch');
SELECT results_eq(
    $$SELECT o ->> 'op_id', o ->> 'recommendation', right(o -> 'target' ->> 'node_id', 2)
      FROM patch2, jsonb_array_elements(patch2.ops) AS o$$,
    $$VALUES ('op_001', 'flag_for_review', '03')$$,
    'a second patch in the same cycle: no decay again, the reviewed corrections and increase are settled');
SELECT is_empty(
    $$SELECT * FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch2), mode => 'auto')$$,
    'auto mode finds nothing to apply in it');

-- stale ops change nothing
SELECT results_eq(
    $$SELECT op_id, status FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch2), ARRAY['op_001'])$$,
    $$VALUES ('op_001', 'applied')$$, 'apply the flag of the second patch (a reviewed raise to semi-stable)');
UPDATE mark SET fp = pg_temp.fingerprint('mt_patch');
SELECT results_eq(
    $$SELECT op_id, status, detail FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch1), ARRAY['op_005'])$$,
    $$VALUES ('op_005', 'stale', 'stability is semi-stable now, the patch expected low')$$,
    'the same raise from the first patch is stale: it expected low');
SELECT is(pg_temp.fingerprint('mt_patch'), (SELECT fp FROM mark), 'a stale op writes nothing');
SELECT is(
    (SELECT o ->> 'status' FROM prme.get_patch('mt_patch', (SELECT patch_id FROM patch1)) AS p,
         jsonb_array_elements(p.ops) AS o WHERE o ->> 'op_id' = 'op_005'),
    'pending', 'a stale op stays pending');

SELECT lives_ok($$
    SELECT prme.add_node('mt_patch', 'low, due a day ago', next_review_at => now() - interval '1 day',
                         node_id => 'f2000000-0000-4000-8000-000000000005');
$$, 'a memory due for decay');
CREATE TEMP TABLE patch3 AS SELECT * FROM prme.maintenance_patch('mt_patch');
SELECT lives_ok($$SELECT prme.reinforce('f2000000-0000-4000-8000-000000000005', 'mt_patch')$$,
                'confirm it after the patch was proposed');
SELECT results_eq(
    $$SELECT op_id, status, detail FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch3), mode => 'auto')$$,
    $$SELECT o ->> 'op_id', 'stale', 'confidence_base is 0.55 now, the patch expected 0.5'
      FROM patch3, jsonb_array_elements(patch3.ops) AS o WHERE o ->> 'op' = 'decay_confidence'$$,
    'a decay proposed before a confirmation is stale');

SELECT lives_ok($$
    SELECT prme.add_node('mt_patch', 'low, due a day ago, archived after the patch',
                         next_review_at => now() - interval '1 day', node_id => 'f2000000-0000-4000-8000-000000000006');
$$, 'a memory due for decay');
CREATE TEMP TABLE patch4 AS SELECT * FROM prme.maintenance_patch('mt_patch');
SELECT lives_ok($$SELECT prme.archive_node('mt_patch', 'f2000000-0000-4000-8000-000000000006')$$,
                'archive it after the patch was proposed');
SELECT results_eq(
    $$SELECT right(node_id::text, 2), op, status, detail
      FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch4), mode => 'auto')$$,
    $$VALUES ('05', 'decay_confidence', 'applied', NULL),
             ('06', 'decay_confidence', 'stale', 'the memory is archived')$$,
    'a later patch proposes the stale decay afresh (from the confirmed confidence); an op for a memory archived '
    'since is stale');
SELECT is((SELECT confidence_base::numeric FROM prme.nodes WHERE id = 'f2000000-0000-4000-8000-000000000005'), 0.4::numeric(5, 4),
          '... 0.55 - 0.15');

-- contested memories are not raised
SELECT results_eq(
    $$SELECT op_id, status FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch1), ARRAY['op_003'])$$,
    $$VALUES ('op_003', 'applied')$$, 'mark_contested applied by selection');
SELECT lives_ok(
    $$SELECT pg_temp.outcomes('mt_patch', 'f2000000-0000-4000-8000-000000000001', 'explicit_reinforcement', 3)$$,
    'three explicit reinforcements of the contested memory');
SELECT is_empty(
    $$SELECT * FROM prme.maintenance_report('mt_patch') WHERE right(node_id::text, 2) = '01'$$,
    'a contested memory is not raised (it needs a human decision)');
SELECT lives_ok(
    $$SELECT pg_temp.outcomes('mt_patch', 'f2000000-0000-4000-8000-000000000001', 'explicit_correction', 1)$$,
    'a new correction after the review');
SELECT results_eq(
    $$SELECT recommendations, explicit_corrections, explicit_reinforcements FROM prme.maintenance_report('mt_patch')
      WHERE right(node_id::text, 2) = '01'$$,
    $$VALUES (ARRAY['review_memory', 'decrease_stability'], 1::bigint, 3::bigint)$$,
    'only the outcomes since the review count: one new correction lowers again');

-- errors
SELECT throws_ok(
    $$SELECT * FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch1), ARRAY['op_006', 'op_999'])$$,
    'PR404', 'operation not found in this patch', 'an unknown op id: PR404');
SELECT throws_ok(
    $$SELECT * FROM prme.apply_patch('mt_alice', (SELECT patch_id FROM patch1), mode => 'auto')$$,
    'PR404', 'patch not found', 'another owner''s patch: PR404');
SELECT throws_ok(
    $$SELECT * FROM prme.get_patch('mt_alice', (SELECT patch_id FROM patch1))$$,
    'PR404', 'patch not found', 'get_patch of another owner''s patch: PR404');
SELECT throws_ok(
    $$SELECT * FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch1))$$,
    'PR422', NULL, 'manual mode without op_ids: PR422');
SELECT throws_ok(
    $$SELECT * FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch1), ARRAY['op_001'], 'auto')$$,
    'PR422', NULL, 'auto mode with op_ids: PR422');
SELECT throws_ok(
    $$SELECT * FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch1), ARRAY['op_001'], 'yolo')$$,
    'PR422', 'mode must be manual or auto', 'an unknown mode: PR422');
SELECT throws_ok(
    $$SELECT * FROM prme.apply_patch('mt_patch', (SELECT patch_id FROM patch1), ARRAY['op_001', NULL])$$,
    'PR422', NULL, 'a NULL op id: PR422');
SELECT throws_ok(
    $$SELECT * FROM prme.maintenance_patch('mt_patch', now() + interval '1 second')$$,
    'PR422', NULL, 'a patch as of the future: PR422');

-- -----------------------------------------------------------------------------
-- 5. mark_reviewed
-- -----------------------------------------------------------------------------
SELECT results_eq(
    $$SELECT next_review_at, version FROM prme.mark_reviewed('mt_alice', 'a2000000-0000-4000-8000-000000000004')$$,
    $$VALUES (now() + interval '2160 hours', 2::bigint)$$,
    'mark_reviewed: next review one cadence ahead (stable: 90 days)');
SELECT is_empty(
    $$SELECT * FROM prme.maintenance_report('mt_alice') WHERE right(node_id::text, 2) = '04'$$,
    'the reviewed corrections no longer count');
SELECT results_eq(
    $$SELECT op, record::jsonb ->> 'policy' FROM prme.journal
      WHERE user_id = 'mt_alice' AND node_id = 'a2000000-0000-4000-8000-000000000004' ORDER BY node_version DESC LIMIT 1$$,
    $$VALUES ('review', 'maintenance_v1')$$,
    'a review is journaled');
SELECT is(
    (SELECT next_review_at FROM prme.mark_reviewed('mt_due', 'a2000000-0000-4000-8000-000000000021',
                                                  now() + interval '3 days')),
    now() + interval '3 days', 'mark_reviewed with an explicit next_review_at');
SELECT is_empty(
    $$SELECT * FROM prme.maintenance_report('mt_due') WHERE right(node_id::text, 2) = '21'$$,
    'a review resets the cadence: no longer due, no decay');
SELECT throws_ok($$SELECT prme.mark_reviewed('mt_due', 'a2000000-0000-4000-8000-000000000026')$$,
                 'PR404', 'node not found', 'mark_reviewed of an archived memory: PR404');
SELECT throws_ok($$SELECT prme.mark_reviewed('mt_bob', 'a2000000-0000-4000-8000-000000000021')$$,
                 'PR404', 'node not found', 'mark_reviewed of another owner''s memory: PR404');
SELECT throws_ok($$SELECT prme.mark_reviewed('mt_due', 'a2000000-0000-4000-8000-000000000021', now())$$,
                 'PR422', NULL, 'mark_reviewed with a next_review_at that is not in the future: PR422');

-- -----------------------------------------------------------------------------
-- 6. The journal of every memory maintenance touched verifies and replays
-- -----------------------------------------------------------------------------
SELECT is_empty($$SELECT * FROM prme.verify_journal('mt_patch')$$, 'verify_journal(mt_patch): no problems');
SELECT is_empty($$SELECT * FROM prme.verify_journal('mt_alice')$$, 'verify_journal(mt_alice): no problems');
SELECT is_empty($$SELECT * FROM prme.verify_journal('mt_due')$$, 'verify_journal(mt_due): no problems');
SELECT is_empty(
    $$SELECT n.id FROM prme.nodes AS n, LATERAL prme.replay_node(n.user_id, n.id) AS r
      WHERE n.user_id IN ('mt_patch', 'mt_alice', 'mt_due') AND NOT r.matches$$,
    'replay_node rebuilds every one of them');
SELECT results_eq(
    $$SELECT op, count(*) FROM prme.journal WHERE user_id = 'mt_patch' GROUP BY op ORDER BY op$$,
    $$VALUES ('archive', 1::bigint), ('create', 6), ('decay_confidence', 3), ('mark_contested', 1),
             ('reinforce', 1), ('update_stability', 3)$$,
    'one journal record per applied op, no more');

SELECT * FROM finish();
ROLLBACK;

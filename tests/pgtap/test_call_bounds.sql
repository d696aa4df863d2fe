-- =============================================================================
-- test_call_bounds.sql: no API call does work beyond what its documented limits
-- allow (issue 17, item 5; docs/SECURITY.md, "Limits").
--
-- Proves: link_correction compares at most 1 MiB of its candidates' content (the
-- owner's active candidates only; others do not count), tokenising each candidate
-- once; is_correction takes at most 64 KiB; a recall or find_nodes query at most
-- 1024 distinct lexemes, find_nodes' lists at most 100 entries; apply_patch at most 10000 op ids of at most 64 characters, and says
-- which are unknown in a bounded detail; canonical_json and payload_hash at most
-- 1 MiB. Each limit is exact, and a refusal is PR422 and writes nothing.
-- =============================================================================
BEGIN;
SELECT plan(25);

-- The DETAIL of the error a query raises (NULL when it raises none).
CREATE FUNCTION pg_temp.detail_of(query text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_detail text;
BEGIN
    EXECUTE query;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS v_detail = PG_EXCEPTION_DETAIL;
    RETURN v_detail;
END;
$$;

-- Seventeen memories of exactly 64 KiB for alice: sixteen make exactly 1 MiB.
CREATE TEMP TABLE big AS
SELECT g, (prme.add_node('cb_alice', rpad(repeat('tabs ', 13107), 65536, 'x'))).id
FROM generate_series(1, 17) AS g;
SELECT is((SELECT sum(octet_length(n.content)) FROM prme.nodes AS n JOIN big USING (id) WHERE g <= 16),
          1048576::bigint, 'fixture: sixteen candidates hold exactly 1 MiB');

-- -----------------------------------------------------------------------------
-- link_correction
-- -----------------------------------------------------------------------------
SET LOCAL track_functions = 'all';
SELECT is(
    (SELECT status FROM prme.link_correction('cb_alice', 'no, spaces', ARRAY(SELECT id FROM big WHERE g <= 16))),
    'unmatched', 'link_correction compares candidates holding exactly 1 MiB');
SELECT is(
    (SELECT calls FROM pg_stat_xact_user_functions WHERE funcid = 'prme._correction_tokens(text)'::regprocedure),
    17::bigint, '... tokenising the message and each candidate once');
SELECT throws_ok(
    $$SELECT * FROM prme.link_correction('cb_alice', 'no, spaces', ARRAY(SELECT id FROM big))$$,
    'PR422', 'the candidates'' content must be at most 1 MiB in all: pass fewer candidates',
    'link_correction refuses candidates holding more than 1 MiB');
SELECT is((SELECT count(*) FROM prme.correction_inbox WHERE user_id = 'cb_alice'), 1::bigint,
          '... and writes nothing (only the first call''s inbox entry)');
SELECT lives_ok($$SELECT prme.archive_node('cb_alice', (SELECT id FROM big WHERE g = 17))$$, 'archive one');
SELECT is(
    (SELECT status FROM prme.link_correction('cb_alice', 'no, spaces', ARRAY(SELECT id FROM big))),
    'unmatched', '... an archived candidate does not count: the active ones hold 1 MiB');
SELECT is(
    (SELECT status FROM prme.link_correction('cb_bob', 'no, spaces', ARRAY(SELECT id FROM big))),
    'unmatched', 'another owner''s candidates do not count (nor are they revealed)');
SELECT throws_ok(
    $$SELECT * FROM prme.link_correction('cb_alice', 'no', ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 1001)))$$,
    'PR422', 'candidate_node_ids must be an array of at most 1000 non-null ids',
    'link_correction takes at most 1000 candidates');

-- -----------------------------------------------------------------------------
-- is_correction
-- -----------------------------------------------------------------------------
SELECT is(prme.is_correction('no, ' || repeat('x', 65532)), TRUE, 'is_correction reads a 64 KiB message');
SELECT throws_ok($$SELECT prme.is_correction('no, ' || repeat('x', 65533))$$,
                 'PR422', 'message must be at most 65536 bytes', 'is_correction refuses more than 64 KiB');

-- -----------------------------------------------------------------------------
-- recall
-- -----------------------------------------------------------------------------
SELECT lives_ok(
    $$SELECT * FROM prme.recall('cb_alice', (SELECT string_agg('x' || g, ' ') FROM generate_series(1, 1024) AS g))$$,
    'recall takes a query of 1024 distinct lexemes');
SELECT throws_ok(
    $$SELECT * FROM prme.recall('cb_alice', (SELECT string_agg('x' || g, ' ') FROM generate_series(1, 1025) AS g))$$,
    'PR422', 'query must have at most 1024 distinct search terms', 'recall refuses more');
SELECT lives_ok(
    $$SELECT * FROM prme.recall('cb_alice', (SELECT string_agg('x1', ' ') FROM generate_series(1, 5000)))$$,
    '... counted after duplicates are merged');
SELECT lives_ok(
    $$SELECT * FROM prme.find_nodes('cb_alice', (SELECT string_agg('x' || g, ' ') FROM generate_series(1, 1024) AS g))$$,
    'find_nodes takes a query of 1024 distinct lexemes');
SELECT throws_ok(
    $$SELECT * FROM prme.find_nodes('cb_alice', (SELECT string_agg('x' || g, ' ') FROM generate_series(1, 1025) AS g))$$,
    'PR422', 'query must have at most 1024 distinct search terms', 'find_nodes refuses more');
SELECT lives_ok(
    $$SELECT * FROM prme.find_nodes('cb_alice', stabilities => array_fill('low'::text, ARRAY[100]))$$,
    'find_nodes takes a list of 100 stabilities');
SELECT throws_ok(
    $$SELECT * FROM prme.find_nodes('cb_alice', lifecycle_states => array_fill('active'::text, ARRAY[101]))$$,
    'PR422', NULL, 'find_nodes refuses a list of 101 lifecycle states');

-- -----------------------------------------------------------------------------
-- apply_patch
-- -----------------------------------------------------------------------------
CREATE TEMP TABLE patch AS SELECT (prme.maintenance_patch('cb_alice')).patch_id;
SELECT throws_ok(
    $$SELECT * FROM prme.apply_patch('cb_alice', (SELECT patch_id FROM patch),
        ARRAY(SELECT 'op_' || g FROM generate_series(1, 10001) AS g))$$,
    'PR422', 'op_ids must list at most 10000 op ids of at most 64 characters', 'apply_patch takes at most 10000 op ids');
SELECT throws_ok(
    $$SELECT * FROM prme.apply_patch('cb_alice', (SELECT patch_id FROM patch), ARRAY['op_' || repeat('1', 62)])$$,
    'PR422', 'op_ids must list at most 10000 op ids of at most 64 characters', '... each at most 64 characters');
SELECT throws_ok(
    $$SELECT * FROM prme.apply_patch('cb_alice', (SELECT patch_id FROM patch),
        ARRAY(SELECT 'op_' || (900 + g) FROM generate_series(1, 25) AS g))$$,
    'PR404', 'operation not found in this patch', 'twenty-five unknown op ids are not found');
SELECT alike(
    (SELECT pg_temp.detail_of($$SELECT * FROM prme.apply_patch('cb_alice', (SELECT patch_id FROM patch),
        ARRAY(SELECT 'op_' || (900 + g) FROM generate_series(1, 25) AS g))$$)),
    'unknown op_ids: op_901, op_902, %, op_920 and 5 more', '... and the detail names twenty of them');

-- -----------------------------------------------------------------------------
-- canonical_json and payload_hash
-- -----------------------------------------------------------------------------
SELECT lives_ok($$SELECT prme.canonical_json(jsonb_build_object('a', repeat('x', 1048000)))$$,
                'canonical_json takes 1 MiB');
SELECT throws_ok($$SELECT prme.canonical_json(jsonb_build_object('a', repeat('x', 1048576)))$$,
                 'PR422', 'value must be at most 1 MiB', 'canonical_json refuses more');
SELECT throws_ok($$SELECT prme.payload_hash(jsonb_build_object('a', repeat('x', 1048576)))$$,
                 'PR422', 'payload must be at most 1 MiB', 'payload_hash refuses more');

SELECT * FROM finish();
ROLLBACK;

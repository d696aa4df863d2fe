-- =============================================================================
-- test_journal.sql: the journal of docs/DESIGN.md section 4.
--
-- Proves: records are RFC 8785 canonical JSON, byte for byte what the Python
-- rfc8785 package produces for the same values (golden text and checksum);
-- their text does not depend on TimeZone, DateStyle or extra_float_digits;
-- add_node writes a create record and reinforce/archive records chain per node;
-- checksum = sha256 hex of the record's UTF-8 bytes; a v1 record stays verifiable
-- under its original checksum and chains into v2; journal and events refuse
-- UPDATE, DELETE and TRUNCATE; and every kind of tampering (record text, deleted
-- middle or newest record, swapped versions, recomputed checksums, edited
-- columns, text that is not JSON) is reported by verify_journal under its own
-- problem name, and breaks replay_node.
--
-- Fixed ids: a0eebc99-... golden node; aaaaaaaa-... alice's nodes; eeeeeeee-...
-- events; cccccccc-... request ids; ffffffff-...-0000000000NN one node per
-- tampering scenario, each under its own owner so verify_journal shows only it.
-- =============================================================================
BEGIN;
SELECT plan(66);

-- -----------------------------------------------------------------------------
-- Helpers
-- -----------------------------------------------------------------------------
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
CREATE FUNCTION pg_temp.unchanged(description text) RETURNS text LANGUAGE sql AS $$
    SELECT is(pg_temp.fingerprint(), (SELECT fp FROM mark), description)
$$;

-- The golden node: every JSON escaping case in its content (quote, backslash,
-- newline, tab, control characters, non-ASCII, an astral emoji, U+2028, DEL),
-- an uppercase UUID, a non-UTC updated_at, and values needing trailing zeros trimmed.
CREATE TEMP TABLE golden (label text PRIMARY KEY, node prme.nodes);
DO $$
DECLARE
    v prme.nodes;
BEGIN
    v.id := 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11';
    v.user_id := 'alice'; v.namespace := 'default'; v.scope := 'personal'; v.kind := 'fact';
    v.content := E'say "hi"\\ \n\t\u0001\u001f \u00e9 \U0001F600 \u2028 \u007f </script>';
    v.confidence_base := 0.6500; v.salience_base := 0.5000; v.reinforcement_boost := 0.0000;
    v.last_reinforced_at := NULL;
    v.evidence_refs := '{EEEEEEEE-0000-4000-8000-0000000000A1}';
    v.stability := 'low'; v.next_review_at := '2026-01-02 03:04:05.000001+00';
    v.lifecycle_state := 'active'; v.decay_profile := 'medium';
    v.created_at := '2026-01-02 03:04:05+00';
    v.updated_at := '2026-01-02 08:49:05.123456+05:45';  -- 03:04:05.123456 UTC
    v.version := 1;
    v.last_checksum := repeat('f', 64);  -- derived: must not appear in the state
    INSERT INTO golden VALUES ('before', v);
    v.confidence_base := 0.7; v.reinforcement_boost := 0.15; v.version := 2;
    v.last_reinforced_at := '2026-01-02 03:04:06+00'; v.updated_at := v.last_reinforced_at;
    v.evidence_refs := v.evidence_refs || 'eeeeeeee-0000-4000-8000-0000000000a2'::uuid;
    INSERT INTO golden VALUES ('after', v);
END;
$$;
CREATE FUNCTION pg_temp.golden(p_label text) RETURNS prme.nodes LANGUAGE sql AS $$
    SELECT node FROM golden WHERE label = p_label
$$;
CREATE FUNCTION pg_temp.golden_record() RETURNS text LANGUAGE sql AS $$
    SELECT prme._journal_record_v2(
        'reinforce', 'additive_caps_v1', '0b0b0b0b-0000-4000-8000-000000000001',
        'cccccccc-0000-4000-8000-000000000001', 'alice', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
        'eeeeeeee-0000-4000-8000-0000000000a2',
        prme._node_state(pg_temp.golden('before')), prme._node_state(pg_temp.golden('after')),
        repeat('f', 64), '2026-01-02 03:04:06+00')
$$;

-- -----------------------------------------------------------------------------
-- 1. Canonical form, against values produced by Python's rfc8785 package
-- -----------------------------------------------------------------------------
SELECT is(
    prme._node_state(pg_temp.golden('before')),
    E'{"confidence_base":0.65,"content":"say \\"hi\\"\\\\ \\n\\t\\u0001\\u001f \u00e9 \U0001F600 \u2028 \u007f </script>",'
    '"created_at":"2026-01-02T03:04:05.000000Z","decay_profile":"medium",'
    '"evidence_refs":["eeeeeeee-0000-4000-8000-0000000000a1"],"id":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",'
    '"kind":"fact","last_reinforced_at":null,"lifecycle_state":"active","namespace":"default",'
    '"next_review_at":"2026-01-02T03:04:05.000001Z","reinforcement_boost":0,"salience_base":0.5,'
    '"scope":"personal","stability":"low","updated_at":"2026-01-02T03:04:05.123456Z","user_id":"alice","version":1}',
    'node state: sorted keys, no whitespace, RFC 8785 escapes, shortest numbers, UTC timestamps, lowercase UUIDs, no last_checksum');
-- sha256 of rfc8785.dumps() of the same record in Python.
SELECT is(
    prme._sha256_hex(pg_temp.golden_record()),
    '2b3df34a3177372d50638e70516b4d5566b6ea2890223a3211bb4ce410ebc860',
    'v2 record: byte-identical to Python rfc8785 (same sha256)');
SELECT is(
    (prme._journal_entry('reinforce', 'additive_caps_v1', '0b0b0b0b-0000-4000-8000-000000000001',
                         'cccccccc-0000-4000-8000-000000000001', 'eeeeeeee-0000-4000-8000-0000000000a2',
                         pg_temp.golden('before'), pg_temp.golden('after'))).checksum,
    '2b3df34a3177372d50638e70516b4d5566b6ea2890223a3211bb4ce410ebc860',
    '_journal_entry builds the same record: prev_checksum from before, recorded_at = after.updated_at');
SELECT is(
    prme._sha256_hex(E'caf\u00e9'), encode(sha256('\x636166c3a9'::bytea), 'hex'),
    '_sha256_hex hashes UTF-8 bytes');
SELECT is(
    prme._sha256_hex('a\nb'), encode(sha256(convert_to('a\nb', 'UTF8')), 'hex'),
    '_sha256_hex does not interpret backslashes (a ::bytea cast would)');
SELECT results_eq(
    $$SELECT prme._json_time(t) FROM unnest(ARRAY[
          '2026-01-02 03:04:05+00', '2026-01-02 08:49:05.123456+05:45', '2026-01-01 23:34:05.5-03:30',
          '0001-01-01 00:00:00+00', '9999-12-31 23:59:59.999999+00', NULL]::timestamptz[]) WITH ORDINALITY AS u(t, i)
      ORDER BY i$$,
    $$VALUES ('"2026-01-02T03:04:05.000000Z"'), ('"2026-01-02T03:04:05.123456Z"'), ('"2026-01-02T03:04:05.500000Z"'),
             ('"0001-01-01T00:00:00.000000Z"'), ('"9999-12-31T23:59:59.999999Z"'), ('null')$$,
    'timestamps: UTC, always six fractional digits, four-digit years, null for NULL');
SELECT matches(
    prme._node_state(ROW('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'alice', 'default', 'personal', 'fact', 'x',
        1.0000, 0.0500, 0.0001, NULL, '{}', 'low', NULL, 'active', 'medium',
        '2026-01-02 03:04:05+00', '2026-01-02 03:04:05+00', 1, repeat('0', 64), NULL, 0,
        0, 0, 0, 0, NULL, 0, 0, 0, 0, NULL, NULL, 0)::prme.nodes),
    '"confidence_base":1,.*"evidence_refs":\[\],.*"next_review_at":null,.*"reinforcement_boost":0.0001,"salience_base":0.05,',
    'numbers 1, 0.05, 0.0001 in shortest form; empty evidence is []; NULL time is null');

-- -----------------------------------------------------------------------------
-- 2. The text does not depend on the session's TimeZone, DateStyle or extra_float_digits
-- -----------------------------------------------------------------------------
CREATE TEMP TABLE renders (settings text, node_state text, record text);
SET LOCAL TimeZone = 'UTC';
SET LOCAL DateStyle = 'ISO, MDY';
SET LOCAL extra_float_digits = 0;
INSERT INTO renders
SELECT 'UTC / ISO, MDY / 0', prme._node_state(pg_temp.golden('before')), pg_temp.golden_record();
SET LOCAL TimeZone = 'Asia/Kathmandu';
SET LOCAL DateStyle = 'SQL, DMY';
SET LOCAL IntervalStyle = 'sql_standard';
SET LOCAL extra_float_digits = 3;
INSERT INTO renders
SELECT 'Asia/Kathmandu / SQL, DMY / 3', prme._node_state(pg_temp.golden('before')), pg_temp.golden_record();
SET LOCAL TimeZone = 'America/St_Johns';
SET LOCAL DateStyle = 'German, DMY';
SET LOCAL extra_float_digits = -15;
INSERT INTO renders
SELECT 'America/St_Johns / German / -15', prme._node_state(pg_temp.golden('before')), pg_temp.golden_record();

SELECT is((SELECT count(DISTINCT node_state) FROM renders), 1::bigint,
          'node state text is identical under three TimeZone/DateStyle/extra_float_digits settings');
SELECT is((SELECT count(DISTINCT record) FROM renders), 1::bigint,
          'record text is identical under three TimeZone/DateStyle/extra_float_digits settings');
SELECT is((SELECT min(prme._sha256_hex(record)) FROM renders),
          '2b3df34a3177372d50638e70516b4d5566b6ea2890223a3211bb4ce410ebc860',
          '... and it is the golden record');

-- -----------------------------------------------------------------------------
-- 3. add_node writes a create record (still under the unusual settings above)
-- -----------------------------------------------------------------------------
SELECT is(
    (prme.add_node('alice', 'likes tea', confidence_base => 0.65, salience_base => 0.5,
                   node_id => 'AAAAAAAA-0000-4000-8000-000000000001')).version,
    1::bigint, 'add_node returns version 1');
SELECT lives_ok($$
    SELECT prme.add_event('alice', 'said so', event_id => 'eeeeeeee-0000-4000-8000-0000000000a1');
$$, 'fixture: an event');

SELECT results_eq(
    $$SELECT node_version::bigint, record_version, op, request_id, evidence_id, prev_checksum::text,
             record::jsonb -> 'before', record::jsonb -> 'policy'
      FROM prme.journal WHERE user_id = 'alice' AND node_id = 'aaaaaaaa-0000-4000-8000-000000000001'$$,
    $$VALUES (1::bigint, 2::smallint, 'create', NULL::uuid, NULL::uuid, NULL::text, 'null'::jsonb, 'null'::jsonb)$$,
    'one create record: version 2 format, before null, prev_checksum null, no key, no evidence, no policy');
SELECT is(
    (SELECT j.record FROM prme.journal AS j WHERE j.user_id = 'alice' AND j.node_id = 'aaaaaaaa-0000-4000-8000-000000000001'),
    (SELECT prme._journal_record_v2('create', NULL, j.operation_id, NULL, 'alice', n.id, NULL, NULL,
                                    prme._node_state(n), NULL, n.updated_at)
     FROM prme.nodes AS n JOIN prme.journal AS j ON j.user_id = n.user_id AND j.node_id = n.id
     WHERE n.user_id = 'alice' AND n.id = 'aaaaaaaa-0000-4000-8000-000000000001'),
    'the create record is exactly the canonical record of the stored node (after = its state)');
SELECT matches(
    (SELECT record FROM prme.journal WHERE user_id = 'alice' AND node_id = 'aaaaaaaa-0000-4000-8000-000000000001'),
    '"node_id":"aaaaaaaa-0000-4000-8000-000000000001"',
    'an uppercase node_id argument is written lowercase');
SELECT is(
    (SELECT array_agg(k ORDER BY k) FROM prme.journal AS j, jsonb_object_keys(j.record::jsonb) AS k
     WHERE j.user_id = 'alice' AND j.node_id = 'aaaaaaaa-0000-4000-8000-000000000001'),
    ARRAY['after', 'before', 'evidence_id', 'node_id', 'op', 'operation_id', 'policy', 'prev_checksum',
          'recorded_at', 'request_id', 'user_id', 'version'],
    'a v2 record has exactly the twelve fields of docs/DESIGN.md section 4');

-- -----------------------------------------------------------------------------
-- 4. reinforce and archive records chain per node
-- -----------------------------------------------------------------------------
SELECT lives_ok($$
    SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',
                          'eeeeeeee-0000-4000-8000-0000000000a1', 'cccccccc-0000-4000-8000-000000000001');
    SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice');
    SELECT prme.archive_node('alice', 'aaaaaaaa-0000-4000-8000-000000000001');
    SELECT prme.add_node('alice', 'another node', node_id => 'aaaaaaaa-0000-4000-8000-000000000002');
    SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000002', 'alice');
$$, 'reinforce twice, archive; a second node reinforced once');

SELECT results_eq(
    $$SELECT node_version::bigint, op, record::jsonb ->> 'policy', request_id, evidence_id
      FROM prme.journal WHERE user_id = 'alice' AND node_id = 'aaaaaaaa-0000-4000-8000-000000000001'
      ORDER BY node_version$$,
    $$VALUES (1::bigint, 'create', NULL, NULL::uuid, NULL::uuid),
             (2, 'reinforce', 'additive_caps_v1', 'cccccccc-0000-4000-8000-000000000001', 'eeeeeeee-0000-4000-8000-0000000000a1'),
             (3, 'reinforce', 'additive_caps_v1', NULL, NULL),
             (4, 'archive', NULL, NULL, NULL)$$,
    'one record per mutation: create, reinforce (with key and evidence), reinforce, archive');
SELECT is_empty(
    $$SELECT node_id, node_version FROM (
          SELECT node_id, node_version, prev_checksum,
                 lag(checksum) OVER (PARTITION BY node_id ORDER BY node_version) AS previous
          FROM prme.journal WHERE user_id = 'alice') AS c
      WHERE prev_checksum IS DISTINCT FROM previous$$,
    'each record''s prev_checksum is the checksum of the node''s previous record (null for the first)');
SELECT is_empty(
    $$SELECT node_id, node_version FROM (
          SELECT node_id, node_version, record::jsonb -> 'before' AS before,
                 lag(record::jsonb -> 'after') OVER (PARTITION BY node_id ORDER BY node_version) AS previous_after
          FROM prme.journal WHERE user_id = 'alice') AS c
      WHERE before IS DISTINCT FROM coalesce(previous_after, 'null')$$,
    'each record''s before is the previous record''s after');
SELECT is_empty(
    $$SELECT n.id FROM prme.nodes AS n
      WHERE n.user_id = 'alice' AND n.last_checksum IS DISTINCT FROM (
          SELECT j.checksum FROM prme.journal AS j WHERE j.user_id = n.user_id AND j.node_id = n.id
          ORDER BY j.node_version DESC LIMIT 1)$$,
    'nodes.last_checksum is the checksum of the node''s newest record');
SELECT is_empty(
    $$SELECT node_id, node_version FROM prme.journal
      WHERE user_id = 'alice' AND checksum <> encode(sha256(convert_to(record, 'UTF8')), 'hex')$$,
    'checksum = encode(sha256(convert_to(record, ''UTF8'')), ''hex'') for every record');
SELECT is_empty(
    $$SELECT node_id, node_version FROM prme.journal AS j, LATERAL (SELECT j.record::jsonb AS d) AS x
      WHERE j.user_id = 'alice' AND (
            d ->> 'node_id' <> j.node_id::text OR d ->> 'user_id' <> j.user_id OR d ->> 'op' <> j.op
         OR (d ->> 'version')::smallint <> j.record_version OR d ->> 'operation_id' <> j.operation_id::text
         OR d ->> 'request_id' IS DISTINCT FROM j.request_id::text
         OR d ->> 'evidence_id' IS DISTINCT FROM j.evidence_id::text
         OR d ->> 'prev_checksum' IS DISTINCT FROM j.prev_checksum
         OR (d -> 'after' ->> 'version')::bigint <> j.node_version
         OR d ->> 'recorded_at' <> d -> 'after' ->> 'updated_at'
         OR (d ->> 'recorded_at')::timestamptz <> j.recorded_at)$$,
    'every journal column is a copy of its record''s field; recorded_at = after.updated_at');
SELECT is_empty(
    $$SELECT j.node_version, t.value FROM prme.journal AS j,
          LATERAL (SELECT j.record::jsonb AS d) AS x,
          LATERAL (VALUES (d ->> 'recorded_at'), (d -> 'after' ->> 'created_at'), (d -> 'after' ->> 'updated_at'),
                          (d -> 'after' ->> 'last_reinforced_at')) AS t(value)
      WHERE j.user_id = 'alice' AND t.value IS NOT NULL
        AND t.value !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$'$$,
    'every timestamp in the records looks like 2026-01-02T03:04:05.000000Z, though TimeZone is America/St_Johns');
SELECT is_empty(
    $$SELECT * FROM prme.verify_journal('alice')$$,
    'verify_journal: no rows for a clean journal');

SET LOCAL TimeZone = 'Pacific/Chatham';
SET LOCAL DateStyle = 'Postgres, MDY';
SET LOCAL extra_float_digits = 1;
SELECT is_empty($$SELECT * FROM prme.verify_journal('alice')$$, '... and under other session settings');
SELECT results_eq(
    $$SELECT records, matches, problem FROM prme.replay_node('alice', 'aaaaaaaa-0000-4000-8000-000000000001')$$,
    $$VALUES (4, true, NULL::text)$$,
    'replay_node rebuilds the node from its four records and matches the stored row');
SELECT is(
    (SELECT replayed = stored FROM prme.replay_node('alice', 'aaaaaaaa-0000-4000-8000-000000000002')),
    true, 'replay_node: replayed state equals stored state for the second node');
RESET TimeZone;
RESET DateStyle;
RESET IntervalStyle;
RESET extra_float_digits;

-- -----------------------------------------------------------------------------
-- 5. A version 1 record stays verifiable and chains into version 2
-- -----------------------------------------------------------------------------
-- Written in the v1 layout (no request_id, no prev_checksum), as an older
-- release would have, with the checksum of its text.
CREATE TEMP TABLE v1 (record text, checksum text);
DO $$
DECLARE
    v prme.nodes;
    r text;
BEGIN
    v.id := 'aaaaaaaa-0000-4000-8000-0000000000f1'; v.user_id := 'legacy'; v.namespace := 'default';
    v.scope := 'personal'; v.kind := 'fact'; v.content := 'from release 0'; v.confidence_base := 0.5;
    v.salience_base := 0.5; v.reinforcement_boost := 0; v.evidence_refs := '{}'; v.stability := 'low';
    v.lifecycle_state := 'active'; v.decay_profile := 'medium';
    v.created_at := '2025-06-01 12:00:00+00'; v.updated_at := v.created_at; v.version := 1;
    r := '{"after":' || prme._node_state(v) || ',"before":null,"evidence_id":null,'
        || '"node_id":"aaaaaaaa-0000-4000-8000-0000000000f1","op":"create",'
        || '"operation_id":"0b0b0b0b-0000-4000-8000-0000000000f1","policy":null,'
        || '"recorded_at":"2025-06-01T12:00:00.000000Z","user_id":"legacy","version":1}';
    v.last_checksum := encode(sha256(convert_to(r, 'UTF8')), 'hex');
    -- Named columns: nodes also has derived, generated columns.
    INSERT INTO prme.nodes (id, user_id, namespace, scope, kind, content, confidence_base, salience_base, reinforcement_boost, last_reinforced_at, evidence_refs, stability, next_review_at, lifecycle_state, decay_profile, created_at, updated_at, version, last_checksum)
    SELECT v.id, v.user_id, v.namespace, v.scope, v.kind, v.content, v.confidence_base, v.salience_base, v.reinforcement_boost, v.last_reinforced_at, v.evidence_refs, v.stability, v.next_review_at, v.lifecycle_state, v.decay_profile, v.created_at, v.updated_at, v.version, v.last_checksum;
    INSERT INTO prme.journal (user_id, node_id, node_version, record_version, op, operation_id, request_id,
                              evidence_id, record, checksum, prev_checksum, recorded_at)
    VALUES ('legacy', v.id, 1, 1, 'create', '0b0b0b0b-0000-4000-8000-0000000000f1', NULL, NULL, r,
            v.last_checksum, NULL, v.created_at);
    INSERT INTO v1 VALUES (r, v.last_checksum);
END;
$$;
SELECT is_empty($$SELECT * FROM prme.verify_journal('legacy')$$, 'a v1 record verifies under the v2 code');
SELECT is((prme.replay_node('legacy', 'aaaaaaaa-0000-4000-8000-0000000000f1')).matches, true,
          'a node with a v1 create record replays');
SELECT is((prme.reinforce('aaaaaaaa-0000-4000-8000-0000000000f1', 'legacy')).version, 2::bigint,
          'the v1 node can be reinforced');
SELECT results_eq(
    $$SELECT j.record_version, j.prev_checksum::text FROM prme.journal AS j
      WHERE j.user_id = 'legacy' ORDER BY j.node_version$$,
    $$SELECT 1::smallint, NULL::text UNION ALL SELECT 2::smallint, (SELECT checksum FROM v1)$$,
    'the new v2 record chains to the v1 record''s original checksum');
SELECT results_eq(
    $$SELECT record, checksum::text FROM prme.journal WHERE user_id = 'legacy' AND node_version = 1$$,
    $$SELECT record, checksum FROM v1$$,
    'the v1 record and its checksum are untouched');
SELECT is_empty($$SELECT * FROM prme.verify_journal('legacy')$$, 'the mixed v1/v2 chain verifies');
SELECT is((prme.replay_node('legacy', 'aaaaaaaa-0000-4000-8000-0000000000f1')).matches, true,
          'the mixed v1/v2 chain replays');
SELECT throws_ok(
    $$INSERT INTO prme.journal (user_id, node_id, node_version, record_version, op, operation_id, request_id,
                                evidence_id, record, checksum, prev_checksum, recorded_at)
      SELECT 'legacy', 'aaaaaaaa-0000-4000-8000-0000000000f1', 3, 1, 'reinforce', gen_random_uuid(),
             'cccccccc-0000-4000-8000-0000000000f1', NULL, '{}', repeat('0', 64), NULL, now()$$,
    '23514', NULL, 'a v1 record cannot carry a request_id (v1 records are not bound to retry keys)');

-- -----------------------------------------------------------------------------
-- 6. journal and events refuse UPDATE, DELETE and TRUNCATE
-- -----------------------------------------------------------------------------
-- Calls above may leave deferred foreign-key checks (request_keys -> journal)
-- pending; TRUNCATE and ALTER TABLE refuse a table with pending trigger events, so
-- run those checks now, then return to the constraint's default.
SET CONSTRAINTS ALL IMMEDIATE;
SET CONSTRAINTS ALL DEFERRED;
UPDATE mark SET fp = pg_temp.fingerprint();
SELECT throws_ok($$UPDATE prme.journal SET op = op WHERE user_id = 'alice'$$,
                 'PR422', 'prme.journal is append-only: UPDATE is not allowed', 'UPDATE on journal is refused');
SELECT throws_ok($$DELETE FROM prme.journal WHERE user_id = 'alice'$$,
                 'PR422', 'prme.journal is append-only: DELETE is not allowed', 'DELETE on journal is refused');
-- request_keys is listed too: alone, TRUNCATE would stop earlier at its foreign key.
SELECT throws_ok($$TRUNCATE prme.journal, prme.request_keys$$,
                 'PR422', 'prme.journal is append-only: TRUNCATE is not allowed', 'TRUNCATE on journal is refused');
SELECT throws_ok($$UPDATE prme.events SET content = 'rewritten' WHERE user_id = 'alice'$$,
                 'PR422', 'prme.events is append-only: UPDATE is not allowed', 'UPDATE on events is refused');
SELECT throws_ok($$DELETE FROM prme.events WHERE user_id = 'alice'$$,
                 'PR422', 'prme.events is append-only: DELETE is not allowed', 'DELETE on events is refused');
SELECT throws_ok($$TRUNCATE prme.events$$,
                 'PR422', 'prme.events is append-only: TRUNCATE is not allowed', 'TRUNCATE on events is refused');
SET LOCAL ROLE prme_owner;
SELECT throws_ok($$UPDATE prme.journal SET op = op WHERE user_id = 'alice'$$,
                 'PR422', NULL, 'the owner of the tables is refused too');
RESET ROLE;
SELECT pg_temp.unchanged('the refused statements changed nothing');

-- -----------------------------------------------------------------------------
-- 7. Tampering (as a superuser who disables the trigger) is found
-- -----------------------------------------------------------------------------
-- Each scenario: one node (create + three reinforces, versions 1..4) of its own owner.
DO $$
DECLARE
    v_user text;
    v_i integer := 0;
BEGIN
    FOREACH v_user IN ARRAY ARRAY['t_text', 't_mid', 't_head', 't_swap', 't_rehash_mid', 't_rehash_head',
                                  't_column', 't_json', 't_gone', 't_node', 't_clean'] LOOP
        v_i := v_i + 1;
        PERFORM prme.add_node(v_user, 'x', confidence_base => 0.65,
                              node_id => ('ffffffff-0000-4000-8000-0000000000' || lpad(v_i::text, 2, '0'))::uuid);
        PERFORM prme.reinforce(('ffffffff-0000-4000-8000-0000000000' || lpad(v_i::text, 2, '0'))::uuid, v_user)
        FROM generate_series(1, 3);
    END LOOP;
END;
$$;
SELECT is_empty(
    $$SELECT * FROM prme.journal AS j, LATERAL prme.verify_journal(j.user_id) AS v WHERE j.user_id LIKE 't\_%'$$,
    'the tampering scenarios start from clean journals');

-- Only inside this transaction: the ROLLBACK at the end restores the trigger.
ALTER TABLE prme.journal DISABLE TRIGGER journal_append_only;

-- a. The text of a middle record is edited (its after's confidence): the checksum no
--    longer matches, and the next record's before no longer follows from it.
UPDATE prme.journal SET record = regexp_replace(record, '^\{"after":\{"confidence_base":[0-9.]+', '{"after":{"confidence_base":0.99')
WHERE user_id = 't_text' AND node_version = 2;
SELECT results_eq(
    $$SELECT node_version, problem FROM prme.verify_journal('t_text')$$,
    $$VALUES (2::bigint, 'checksum_mismatch'), (3::bigint, 'continuity_break')$$,
    'edited record text: checksum_mismatch, then continuity_break');
SELECT is((prme.replay_node('t_text', 'ffffffff-0000-4000-8000-000000000001')).matches, false,
          'edited record text: replay_node does not match');

-- b. A middle record is deleted.
DELETE FROM prme.journal WHERE user_id = 't_mid' AND node_version = 2;
SELECT results_eq(
    $$SELECT node_version, problem FROM prme.verify_journal('t_mid')$$,
    $$VALUES (3::bigint, 'continuity_break'), (3::bigint, 'version_gap'), (3::bigint, 'chain_break')$$,
    'deleted middle record: continuity_break, version_gap and chain_break at the next record');
SELECT is((prme.replay_node('t_mid', 'ffffffff-0000-4000-8000-000000000002')).matches, false,
          'deleted middle record: replay_node does not match');

-- c. The newest record is deleted: no later link shows it; the node's head does.
DELETE FROM prme.journal WHERE user_id = 't_head' AND node_version = 4;
SELECT results_eq(
    $$SELECT node_id, node_version, problem FROM prme.verify_journal('t_head')$$,
    $$VALUES ('ffffffff-0000-4000-8000-000000000003'::uuid, 4::bigint, 'head_mismatch')$$,
    'deleted newest record: head_mismatch');
SELECT results_eq(
    $$SELECT records, matches, problem FROM prme.replay_node('t_head', 'ffffffff-0000-4000-8000-000000000003')$$,
    $$VALUES (3, false, 'stored row differs from replay')$$,
    'deleted newest record: replay_node stops at version 3 and does not match');

-- d. Two records swap their node_version.
UPDATE prme.journal SET node_version = 100 WHERE user_id = 't_swap' AND node_version = 2;
UPDATE prme.journal SET node_version = 2 WHERE user_id = 't_swap' AND node_version = 3;
UPDATE prme.journal SET node_version = 3 WHERE user_id = 't_swap' AND node_version = 100;
SELECT results_eq(
    $$SELECT node_version, problem FROM prme.verify_journal('t_swap')$$,
    $$VALUES (2::bigint, 'column_mismatch'), (2::bigint, 'continuity_break'), (2::bigint, 'chain_break'),
             (3::bigint, 'column_mismatch'), (3::bigint, 'continuity_break'), (3::bigint, 'chain_break'),
             (4::bigint, 'continuity_break'), (4::bigint, 'chain_break')$$,
    'swapped node_version: column_mismatch, continuity_break and chain_break');
SELECT is((prme.replay_node('t_swap', 'ffffffff-0000-4000-8000-000000000004')).matches, false,
          'swapped node_version: replay_node does not match');

-- e. A middle record is edited and its checksum recomputed: the next link breaks.
UPDATE prme.journal
SET record = regexp_replace(record, '^\{"after":\{"confidence_base":[0-9.]+', '{"after":{"confidence_base":0.99')
WHERE user_id = 't_rehash_mid' AND node_version = 2;
UPDATE prme.journal SET checksum = encode(sha256(convert_to(record, 'UTF8')), 'hex')
WHERE user_id = 't_rehash_mid' AND node_version = 2;
SELECT results_eq(
    $$SELECT node_version, problem FROM prme.verify_journal('t_rehash_mid')$$,
    $$VALUES (3::bigint, 'continuity_break'), (3::bigint, 'chain_break')$$,
    'edited middle record with recomputed checksum: continuity_break and chain_break at the next record');
SELECT is((prme.replay_node('t_rehash_mid', 'ffffffff-0000-4000-8000-000000000005')).matches, false,
          'edited middle record with recomputed checksum: replay_node does not match');

-- f. The newest record is edited and its checksum recomputed: only the head shows it.
UPDATE prme.journal
SET record = regexp_replace(record, '^\{"after":\{"confidence_base":[0-9.]+', '{"after":{"confidence_base":0.99')
WHERE user_id = 't_rehash_head' AND node_version = 4;
UPDATE prme.journal SET checksum = encode(sha256(convert_to(record, 'UTF8')), 'hex')
WHERE user_id = 't_rehash_head' AND node_version = 4;
SELECT results_eq(
    $$SELECT node_version, problem FROM prme.verify_journal('t_rehash_head')$$,
    $$VALUES (4::bigint, 'head_mismatch')$$,
    'edited newest record with recomputed checksum: head_mismatch');
SELECT results_eq(
    $$SELECT matches, problem FROM prme.replay_node('t_rehash_head', 'ffffffff-0000-4000-8000-000000000006')$$,
    $$VALUES (false, 'record 4: after does not follow from before under additive_caps_v1')$$,
    'edited newest record with recomputed checksum: replay_node re-derives the caps and rejects it');

-- g. A column is edited while the record is left alone.
UPDATE prme.journal SET op = 'archive' WHERE user_id = 't_column' AND node_version = 3;
SELECT results_eq(
    $$SELECT node_version, problem FROM prme.verify_journal('t_column')$$,
    $$VALUES (3::bigint, 'column_mismatch')$$,
    'edited op column: column_mismatch');

-- h. The record text is no longer JSON.
UPDATE prme.journal SET record = 'not json' WHERE user_id = 't_json' AND node_version = 2;
SELECT results_eq(
    $$SELECT node_version, problem FROM prme.verify_journal('t_json')$$,
    $$VALUES (2::bigint, 'checksum_mismatch'), (2::bigint, 'malformed_record'), (3::bigint, 'continuity_break')$$,
    'record text that is not JSON: checksum_mismatch, malformed_record, then continuity_break');
SELECT results_eq(
    $$SELECT matches, problem FROM prme.replay_node('t_json', 'ffffffff-0000-4000-8000-000000000008')$$,
    $$VALUES (false, 'record 2 is not valid JSON')$$,
    'record text that is not JSON: replay_node reports it');

-- i. Every record of a node is deleted.
DELETE FROM prme.journal WHERE user_id = 't_gone';
SELECT results_eq(
    $$SELECT node_id, problem, detail ~ 'newest record is missing' FROM prme.verify_journal('t_gone')$$,
    $$VALUES ('ffffffff-0000-4000-8000-000000000009'::uuid, 'head_mismatch', true)$$,
    'all records of a node deleted: head_mismatch naming the missing record');
SELECT results_eq(
    $$SELECT records, matches, problem FROM prme.replay_node('t_gone', 'ffffffff-0000-4000-8000-000000000009')$$,
    $$VALUES (0, false, 'no journal records')$$,
    'all records of a node deleted: replay_node finds none');

-- j. The node row itself is edited (nodes is not append-only): the journal is
--    intact, so verify_journal is silent; replay_node compares with the row.
UPDATE prme.nodes SET confidence_base = 0.99 WHERE user_id = 't_node';
SELECT is_empty($$SELECT * FROM prme.verify_journal('t_node')$$,
                'edited node row: the journal itself still verifies');
SELECT results_eq(
    $$SELECT matches, problem FROM prme.replay_node('t_node', 'ffffffff-0000-4000-8000-000000000010')$$,
    $$VALUES (false, 'stored row differs from replay')$$,
    'edited node row: replay_node reports that the stored row differs');

SELECT is_empty($$SELECT * FROM prme.verify_journal('t_clean')$$,
                'another owner''s journal still verifies: problems are reported per owner');
SELECT is_empty($$SELECT * FROM prme.verify_journal('alice')$$, 'alice''s journal still verifies');

-- The trigger comes back with the ROLLBACK (re-enabling it here would be refused:
-- the tampering left deferred foreign-key checks pending on prme.journal).
SELECT * FROM finish();
ROLLBACK;

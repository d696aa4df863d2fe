-- =============================================================================
-- test_snapshots.sql: snapshot generations and prompt assembly (docs/SNAPSHOTS.md).
--
-- Proves: a generation is the exact RFC 8785 document of the scope's active
-- memories, strongest first, whose id is the sha256 of its text; republishing
-- identical content writes nothing and returns the same id, and content that
-- comes back is the same generation; scopes and owners publish independently;
-- max_items and max_bytes hold to the byte (a memory that does not fit is
-- skipped, a later one that fits is taken); compare-and-set publishing refuses a
-- stale expectation with PR409 and changes nothing; the pointer only moves
-- forward and every advance is logged with what it replaced; generations and
-- history refuse UPDATE, DELETE and TRUNCATE, heads refuse DELETE, TRUNCATE and
-- backward moves, and a generation whose id is not its hash cannot be stored;
-- reads verify the hash (XX001 when tampered); assemble_prompt lays out the
-- current generations exactly, in the order asked, within the byte budget, and
-- reports the generation ids it used; bad arguments raise PR422 and change nothing.
--
-- Every memory here is 'permanent' without boost, so the ranking (and so every
-- document) does not depend on the time the test runs.
-- =============================================================================
BEGIN;
SELECT plan(85);

CREATE FUNCTION pg_temp.seed(
    p_user text, p_id text, p_content text, p_salience numeric, p_confidence numeric,
    p_state text DEFAULT 'active', p_scope text DEFAULT 'personal'
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v prme.nodes;
    e prme.journal;
BEGIN
    v.id := p_id::uuid; v.user_id := p_user; v.namespace := 'default'; v.scope := p_scope; v.kind := 'fact';
    v.content := p_content; v.confidence_base := p_confidence; v.salience_base := p_salience;
    v.reinforcement_boost := 0; v.evidence_refs := '{}'; v.stability := 'low';
    v.lifecycle_state := p_state; v.decay_profile := 'permanent';
    v.created_at := '2025-01-01 00:00:00+00'; v.updated_at := v.created_at; v.version := 1;
    e := prme._journal_entry('create', NULL, gen_random_uuid(), NULL, NULL, NULL, v);
    v.last_checksum := e.checksum;
    INSERT INTO prme.nodes (
        id, user_id, namespace, scope, kind, content, confidence_base, salience_base, reinforcement_boost,
        last_reinforced_at, evidence_refs, stability, next_review_at, lifecycle_state, decay_profile,
        created_at, updated_at, version, last_checksum
    ) VALUES (
        v.id, v.user_id, v.namespace, v.scope, v.kind, v.content, v.confidence_base, v.salience_base,
        v.reinforcement_boost, v.last_reinforced_at, v.evidence_refs, v.stability, v.next_review_at,
        v.lifecycle_state, v.decay_profile, v.created_at, v.updated_at, v.version, v.last_checksum
    );
    INSERT INTO prme.journal SELECT e.*;
END;
$$;

CREATE FUNCTION pg_temp.sha(p text) RETURNS text LANGUAGE sql AS $$
    SELECT encode(sha256(convert_to(p, 'UTF8')), 'hex')
$$;

-- Row counts of the three snapshot tables and every head, for "nothing changed".
CREATE FUNCTION pg_temp.state() RETURNS text LANGUAGE sql AS $$
    SELECT format('generations=%s history=%s heads=%s',
        (SELECT count(*) FROM prme.snapshot_generations),
        (SELECT count(*) FROM prme.snapshot_history),
        (SELECT string_agg(h.user_id || '/' || h.scope || '@' || h.seq || ':' || left(h.generation_id, 8), ','
                           ORDER BY h.user_id, h.scope) FROM prme.snapshot_heads AS h))
$$;
CREATE TEMP TABLE mark (state text);
INSERT INTO mark VALUES (NULL);

CREATE TEMP TABLE doc (name text PRIMARY KEY, body text);
INSERT INTO doc VALUES
('personal1', $d${"items":[{"content":"Prefers tabs over spaces","id":"aaaaaaaa-0000-4000-8000-000000000001","kind":"fact"},{"content":"Writes \"quotes\", back\\slashes and\nnewlines — ünïcode","id":"aaaaaaaa-0000-4000-8000-000000000002","kind":"fact"},{"content":"Lives in Berlin","id":"aaaaaaaa-0000-4000-8000-000000000003","kind":"fact"}],"scope":"personal","user_id":"alice","version":1}$d$),
('work1', $d${"items":[{"content":"Deploys are frozen on Fridays","id":"aaaaaaaa-0000-4000-8000-000000000006","kind":"fact"}],"scope":"work","user_id":"alice","version":1}$d$),
('empty', $d${"items":[],"scope":"personal","user_id":"alice","version":1}$d$);

SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000001', 'Prefers tabs over spaces', 0.9, 0.9);
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000002',
                    E'Writes "quotes", back\\slashes and\nnewlines — ünïcode', 0.8, 0.8);
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000003', 'Lives in Berlin', 0.5, 0.5);
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000004', 'Archived memory', 1, 1, 'archived');
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000005', 'Contested memory', 1, 1, 'contested');
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000006', 'Deploys are frozen on Fridays', 0.5, 0.5,
                    'active', 'work');
SELECT pg_temp.seed('bob', 'bbbbbbbb-0000-4000-8000-000000000001', 'Bob prefers spaces', 0.5, 0.5);

-- -----------------------------------------------------------------------------
-- 1. The first generation
-- -----------------------------------------------------------------------------
SELECT results_eq(
    $$SELECT generation_id, seq, previous_generation_id, item_count, byte_size, advanced
      FROM prme.publish_snapshot('alice', 'personal')$$,
    $$SELECT pg_temp.sha(body), 1::bigint, NULL::text, 3, octet_length(body), true FROM doc WHERE name = 'personal1'$$,
    'publish: seq 1, three items, id = sha256 of the document, byte_size = its octet length');
SELECT is((prme.current_snapshot('alice', 'personal')).document, (SELECT body FROM doc WHERE name = 'personal1'),
          'the document is exactly the RFC 8785 text: sorted keys, strongest first, archived and contested left out');
SELECT results_eq(
    $$SELECT generation_id, seq, item_count, byte_size, created_at = advanced_at FROM prme.current_snapshot('alice', 'personal')$$,
    $$SELECT pg_temp.sha(body), 1::bigint, 3, octet_length(body), true FROM doc WHERE name = 'personal1'$$,
    'current_snapshot returns the whole generation with its id, seq and sizes');
SELECT is(
    (prme.current_snapshot('alice', 'personal')).document::json -> 'items' -> 1 ->> 'content',
    E'Writes "quotes", back\\slashes and\nnewlines — ünïcode', 'content round-trips through the document');
UPDATE mark SET state = pg_temp.state();
SELECT results_eq(
    $$SELECT generation_id, seq, previous_generation_id, advanced FROM prme.publish_snapshot('alice', 'personal')$$,
    $$SELECT pg_temp.sha(body), 1::bigint, pg_temp.sha(body), false FROM doc WHERE name = 'personal1'$$,
    'republishing identical content: the same generation id, seq unchanged, advanced = false');
SELECT is(pg_temp.state(), (SELECT state FROM mark), '... and nothing was written');
SELECT results_eq(
    $$SELECT generation_id, seq, advanced FROM prme.publish_snapshot('alice', 'work')$$,
    $$SELECT pg_temp.sha(body), 1::bigint, true FROM doc WHERE name = 'work1'$$,
    'another scope publishes independently: its own generation and seq');
SELECT is((prme.current_snapshot('alice', 'personal')).seq, 1::bigint, '... leaving personal where it was');
SELECT lives_ok($$SELECT prme.publish_snapshot('bob', 'personal')$$, 'bob publishes his personal scope');
SELECT is(
    (prme.current_snapshot('bob', 'personal')).document,
    '{"items":[{"content":"Bob prefers spaces","id":"bbbbbbbb-0000-4000-8000-000000000001","kind":"fact"}],'
    || '"scope":"personal","user_id":"bob","version":1}',
    '... containing only his memories');
SELECT is((prme.current_snapshot('alice', 'personal')).document, (SELECT body FROM doc WHERE name = 'personal1'),
          '... and alice''s generation is untouched');
SELECT throws_ok(
    format('SELECT prme.get_snapshot(%L, %L, %L)', 'bob', 'personal', (SELECT pg_temp.sha(body) FROM doc WHERE name = 'personal1')),
    'PR404', 'snapshot generation not found', 'bob cannot read alice''s generation by its id');

-- -----------------------------------------------------------------------------
-- 2. Changes, content addressing and the pointer's history
-- -----------------------------------------------------------------------------
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000007', 'Drinks green tea', 0.7, 0.7);
SELECT results_eq(
    $$SELECT seq, previous_generation_id, item_count, advanced FROM prme.publish_snapshot('alice', 'personal')$$,
    $$SELECT 2::bigint, pg_temp.sha(body), 4, true FROM doc WHERE name = 'personal1'$$,
    'a new memory: a new generation, seq 2, replacing the first');
SELECT is(
    (prme.current_snapshot('alice', 'personal')).document::json -> 'items' -> 2 ->> 'id',
    'aaaaaaaa-0000-4000-8000-000000000007', '... ranked by strength (0.7 + 0.7 between 0.8 + 0.8 and 0.5 + 0.5)');
INSERT INTO doc SELECT 'personal2', (prme.current_snapshot('alice', 'personal')).document;
SELECT lives_ok($$SELECT prme.archive_node('alice', 'aaaaaaaa-0000-4000-8000-000000000007')$$, 'archive that memory');
SELECT results_eq(
    $$SELECT generation_id, seq, previous_generation_id, advanced FROM prme.publish_snapshot('alice', 'personal')$$,
    $$SELECT pg_temp.sha(p1.body), 3::bigint, pg_temp.sha(p2.body), true
      FROM doc AS p1, doc AS p2 WHERE p1.name = 'personal1' AND p2.name = 'personal2'$$,
    'the content is back to the first: the first generation is current again, at seq 3');
SELECT is(
    (SELECT count(*) FROM prme.snapshot_generations WHERE user_id = 'alice' AND scope = 'personal'), 2::bigint,
    '... stored once: two generations for three advances');
SELECT results_eq(
    $$SELECT seq, generation_id, previous_generation_id FROM prme.snapshot_history
      WHERE user_id = 'alice' AND scope = 'personal' ORDER BY seq$$,
    $$SELECT * FROM (VALUES
        (1::bigint, (SELECT pg_temp.sha(body) FROM doc WHERE name = 'personal1'), NULL::text),
        (2::bigint, (SELECT pg_temp.sha(body) FROM doc WHERE name = 'personal2'),
                    (SELECT pg_temp.sha(body) FROM doc WHERE name = 'personal1')),
        (3::bigint, (SELECT pg_temp.sha(body) FROM doc WHERE name = 'personal1'),
                    (SELECT pg_temp.sha(body) FROM doc WHERE name = 'personal2'))) AS h$$,
    'the history logs every advance with the generation it replaced');
SELECT results_eq(
    format('SELECT seq, document FROM prme.get_snapshot(%L, %L, %L)', 'alice', 'personal',
           (SELECT pg_temp.sha(body) FROM doc WHERE name = 'personal2')),
    $$SELECT 2::bigint, body FROM doc WHERE name = 'personal2'$$,
    'get_snapshot reads an earlier generation, with the seq that made it current');
SELECT is(
    (prme.get_snapshot('alice', 'personal', (SELECT pg_temp.sha(body) FROM doc WHERE name = 'personal1'))).seq,
    3::bigint, '... the latest such seq for a generation that was current twice');

-- -----------------------------------------------------------------------------
-- 3. Bounds: max_items and max_bytes, to the byte
-- -----------------------------------------------------------------------------
SELECT is((prme.publish_snapshot('alice', 'personal', max_items => 2)).item_count, 2, 'max_items 2: two items');
SELECT is(
    (prme.current_snapshot('alice', 'personal')).document::json -> 'items' ->> 1,
    (SELECT body FROM doc WHERE name = 'personal1')::json -> 'items' ->> 1,
    '... the two strongest');
SELECT results_eq(
    format('SELECT generation_id, byte_size FROM prme.publish_snapshot(%L, %L, max_bytes => %s)', 'alice', 'personal',
           (SELECT octet_length(body) FROM doc WHERE name = 'personal1')),
    $$SELECT pg_temp.sha(body), octet_length(body) FROM doc WHERE name = 'personal1'$$,
    'max_bytes equal to the full document: everything fits');
SELECT results_eq(
    format('SELECT item_count, byte_size <= %1$s FROM prme.publish_snapshot(%2$L, %3$L, max_bytes => %1$s)',
           (SELECT octet_length(body) - 1 FROM doc WHERE name = 'personal1'), 'alice', 'personal'),
    $$VALUES (2, true)$$,
    'one byte less: the last memory no longer fits');
-- Room for the first and third items only: the long second one is skipped, the third is taken.
CREATE TEMP TABLE budget AS
SELECT octet_length((prme._snapshot_envelope('alice', 'personal'))[1])
     + octet_length((prme._snapshot_envelope('alice', 'personal'))[2])
     + octet_length(prme._snapshot_item('aaaaaaaa-0000-4000-8000-000000000001', 'fact', 'Prefers tabs over spaces')) + 1
     + octet_length(prme._snapshot_item('aaaaaaaa-0000-4000-8000-000000000003', 'fact', 'Lives in Berlin')) AS b;
SELECT results_eq(
    format('SELECT item_count, byte_size FROM prme.publish_snapshot(%L, %L, max_bytes => %s)', 'alice', 'personal',
           (SELECT b FROM budget)),
    $$SELECT 2, b FROM budget$$,
    'a memory that does not fit is skipped and a later one that fits is taken (exactly at the budget)');
SELECT is(
    (SELECT array_agg(i ->> 'id') FROM json_array_elements((prme.current_snapshot('alice', 'personal')).document::json -> 'items') AS i),
    ARRAY['aaaaaaaa-0000-4000-8000-000000000001', 'aaaaaaaa-0000-4000-8000-000000000003'],
    '... first and third, in rank order');
SELECT results_eq(
    format('SELECT generation_id, item_count FROM prme.publish_snapshot(%L, %L, max_bytes => %s)', 'alice', 'personal',
           (SELECT octet_length(body) FROM doc WHERE name = 'empty')),
    $$SELECT pg_temp.sha(body), 0 FROM doc WHERE name = 'empty'$$,
    'max_bytes of an empty generation: a valid empty generation');
SELECT throws_ok(
    format('SELECT prme.publish_snapshot(%L, %L, max_bytes => %s)', 'alice', 'personal',
           (SELECT octet_length(body) - 1 FROM doc WHERE name = 'empty')),
    'PR422', 'max_bytes is too small for even an empty generation of this scope',
    'max_bytes below an empty generation: PR422');
SELECT is_empty(
    $$SELECT b, p.byte_size FROM generate_series(61, 420, 7) AS b,
          LATERAL prme.publish_snapshot('alice', 'personal', max_bytes => b) AS p
      WHERE p.byte_size > b$$,
    'for every budget from 61 (an empty generation) to 420 bytes the document fits to the byte');
SELECT is_empty(
    $$SELECT h.seq FROM prme.snapshot_history AS h
      JOIN prme.snapshot_history AS p ON p.user_id = h.user_id AND p.scope = h.scope AND p.seq = h.seq - 1
      WHERE h.user_id = 'alice' AND h.previous_generation_id IS DISTINCT FROM p.generation_id$$,
    'through all of that, each advance replaced exactly the generation before it');
SELECT is(
    (SELECT array_agg(seq ORDER BY seq) = array_agg(rn ORDER BY seq)
     FROM (SELECT seq, row_number() OVER (ORDER BY seq) AS rn FROM prme.snapshot_history
           WHERE user_id = 'alice' AND scope = 'personal') AS h),
    true, '... and seq runs 1, 2, 3, ... without gaps');
SELECT lives_ok($$SELECT prme.publish_snapshot('alice', 'personal')$$, 'publish the full personal scope again');

-- -----------------------------------------------------------------------------
-- 4. Compare-and-set
-- -----------------------------------------------------------------------------
UPDATE mark SET state = pg_temp.state();
SELECT throws_ok(
    format('SELECT prme.publish_snapshot(%L, %L, expected_generation_id => %L)', 'alice', 'personal',
           (SELECT pg_temp.sha(body) FROM doc WHERE name = 'personal2')),
    'PR409', 'the current snapshot is not the expected generation', 'a stale expected generation: PR409');
SELECT throws_ok(
    $$SELECT prme.publish_snapshot('alice', 'personal', expected_generation_id => 'none')$$,
    'PR409', NULL, 'expecting ''none'' on a published scope: PR409');
SELECT is(pg_temp.state(), (SELECT state FROM mark), '... neither changed anything');
SELECT results_eq(
    format('SELECT seq, advanced FROM prme.publish_snapshot(%L, %L, expected_generation_id => %L)', 'alice', 'personal',
           (prme.current_snapshot('alice', 'personal')).generation_id),
    format('VALUES (%s::bigint, false)', (prme.current_snapshot('alice', 'personal')).seq),
    'the right expectation and identical content: nothing to do, no error');
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000008', 'Reads on Sundays', 0.1, 0.1);
SELECT results_eq(
    format('SELECT seq, previous_generation_id, advanced FROM prme.publish_snapshot(%L, %L, expected_generation_id => %L)',
           'alice', 'personal', (prme.current_snapshot('alice', 'personal')).generation_id),
    format('VALUES (%s::bigint, %L, true)', (prme.current_snapshot('alice', 'personal')).seq + 1,
           (prme.current_snapshot('alice', 'personal')).generation_id),
    'the right expectation and new content: advanced by one');
SELECT results_eq(
    $$SELECT seq, advanced FROM prme.publish_snapshot('alice', 'hobbies', expected_generation_id => 'none')$$,
    $$VALUES (1::bigint, true)$$,
    'expecting ''none'' on a scope never published: its first generation (empty)');
SELECT throws_ok($$SELECT prme.publish_snapshot('alice', 'personal', expected_generation_id => 'ABC')$$, 'PR422',
                 'expected_generation_id must be 64 lowercase hex digits, or ''none'' for a scope never published',
                 'a malformed expected generation: PR422');
SELECT throws_ok(format('SELECT prme.publish_snapshot(%L, %L, expected_generation_id => %L)', 'alice', 'personal',
                        upper((prme.current_snapshot('alice', 'personal')).generation_id)),
                 'PR422', NULL, 'uppercase hex: PR422');

-- -----------------------------------------------------------------------------
-- 5. Bad arguments change nothing
-- -----------------------------------------------------------------------------
UPDATE mark SET state = pg_temp.state();
SELECT throws_ok($$SELECT prme.publish_snapshot(NULL, 'personal')$$, 'PR422', 'user_id must not be null', 'NULL user_id');
SELECT throws_ok($$SELECT prme.publish_snapshot('alice', 'Personal')$$, 'PR422', 'scope must match ^[a-z][a-z0-9_-]{0,62}$',
                 'a malformed scope');
SELECT throws_ok($$SELECT prme.publish_snapshot('alice', NULL)$$, 'PR422', NULL, 'NULL scope');
SELECT throws_ok($$SELECT prme.publish_snapshot('alice', 'personal', 0)$$, 'PR422',
                 'max_items must be between 1 and 10000', 'max_items 0');
SELECT throws_ok($$SELECT prme.publish_snapshot('alice', 'personal', 10001)$$, 'PR422', NULL, 'max_items 10001');
SELECT throws_ok($$SELECT prme.publish_snapshot('alice', 'personal', NULL)$$, 'PR422', NULL, 'max_items NULL');
SELECT throws_ok($$SELECT prme.publish_snapshot('alice', 'personal', 10, 0)$$, 'PR422',
                 'max_bytes must be between 1 and 16777216', 'max_bytes 0');
SELECT throws_ok($$SELECT prme.publish_snapshot('alice', 'personal', 10, -5)$$, 'PR422', NULL, 'max_bytes negative');
SELECT throws_ok($$SELECT prme.publish_snapshot('alice', 'personal', 10, 16777217)$$, 'PR422', NULL,
                 'max_bytes over 16 MiB');
SELECT throws_ok($$SELECT prme.publish_snapshot('alice', 'personal', 10, NULL)$$, 'PR422', NULL, 'max_bytes NULL');
SELECT throws_ok($$SELECT prme.current_snapshot('alice', 'never')$$, 'PR404',
                 'no snapshot has been published for this scope', 'current_snapshot of a scope never published: PR404');
SELECT throws_ok($$SELECT prme.current_snapshot('bob', 'work')$$, 'PR404', NULL,
                 'current_snapshot of a scope only another owner published: PR404');
SELECT throws_ok($$SELECT prme.current_snapshot('alice', 'bad scope')$$, 'PR422', NULL, 'current_snapshot: bad scope');
SELECT throws_ok($$SELECT prme.get_snapshot('alice', 'personal', 'xyz')$$, 'PR422',
                 'generation_id must be 64 lowercase hex digits', 'get_snapshot: malformed id');
SELECT throws_ok(format('SELECT prme.get_snapshot(%L, %L, %L)', 'alice', 'personal', repeat('0', 64)), 'PR404', NULL,
                 'get_snapshot: unknown id');
SELECT is(pg_temp.state(), (SELECT state FROM mark), 'none of these changed anything');

-- -----------------------------------------------------------------------------
-- 6. assemble_prompt
-- -----------------------------------------------------------------------------
SELECT lives_ok($$SELECT prme.archive_node('alice', 'aaaaaaaa-0000-4000-8000-000000000008')$$, 'archive the Sunday memory');
SELECT results_eq(
    $$SELECT generation_id FROM prme.publish_snapshot('alice', 'personal')$$,
    $$SELECT pg_temp.sha(body) FROM doc WHERE name = 'personal1'$$,
    'personal is back to its first generation');
CREATE TEMP TABLE prompt (name text PRIMARY KEY, body text);
INSERT INTO prompt VALUES ('full',
    E'[personal]\n- Prefers tabs over spaces\n- Writes "quotes", back\\slashes and\n  newlines — ünïcode\n'
    || E'- Lives in Berlin\n\n[work]\n- Deploys are frozen on Fridays\n');
SELECT results_eq(
    $$SELECT prompt, byte_size, item_count, truncated FROM prme.assemble_prompt('alice', ARRAY['personal', 'work'], 4096)$$,
    $$SELECT body, octet_length(body), 4, false FROM prompt WHERE name = 'full'$$,
    'the prompt: a [scope] header, "- " items in generation order, continuation lines indented, an empty line between');
SELECT results_eq(
    $$SELECT generation_scopes, generation_ids
      FROM prme.assemble_prompt('alice', ARRAY['personal', 'never', 'work', 'personal'], 4096)$$,
    $$SELECT ARRAY['personal', 'never', 'work'],
             ARRAY[(SELECT pg_temp.sha(body) FROM doc WHERE name = 'personal1'), NULL,
                   (SELECT pg_temp.sha(body) FROM doc WHERE name = 'work1')]$$,
    'the generation id used for each scope, in order, duplicates dropped, NULL for a scope never published');
SELECT is(
    (prme.assemble_prompt('alice', ARRAY['work', 'personal'], 4096)).prompt,
    E'[work]\n- Deploys are frozen on Fridays\n\n[personal]\n- Prefers tabs over spaces\n'
    || E'- Writes "quotes", back\\slashes and\n  newlines — ünïcode\n- Lives in Berlin\n',
    'scopes appear in the order asked');
SELECT results_eq(
    format('SELECT prompt, truncated FROM prme.assemble_prompt(%L, %L, %s)', 'alice', '{personal,work}',
           (SELECT octet_length(body) FROM prompt WHERE name = 'full')),
    $$SELECT body, false FROM prompt WHERE name = 'full'$$,
    'a budget of exactly the prompt''s size: all of it');
SELECT results_eq(
    format('SELECT byte_size <= %1$s, item_count, truncated FROM prme.assemble_prompt(%2$L, %3$L, %1$s)',
           (SELECT octet_length(body) - 1 FROM prompt WHERE name = 'full'), 'alice', '{personal,work}'),
    $$VALUES (true, 3, true)$$,
    'one byte less: the last item is dropped and truncated is true');
SELECT is(
    (prme.assemble_prompt('alice', ARRAY['personal', 'work'], 56)).prompt,
    E'[personal]\n- Prefers tabs over spaces\n- Lives in Berlin\n',
    'a long item that does not fit is skipped; a later one that fits is taken');
SELECT is(
    (prme.assemble_prompt('alice', ARRAY['personal'], 10)).prompt, '',
    'a budget too small for any section: an empty prompt');
SELECT is_empty(
    $$SELECT b FROM generate_series(1, 200) AS b, LATERAL prme.assemble_prompt('alice', ARRAY['personal', 'work'], b) AS a
      WHERE octet_length(a.prompt) > b OR a.byte_size <> octet_length(a.prompt)$$,
    'for every budget from 1 to 200 bytes the prompt fits to the byte');
SELECT is(
    (prme.assemble_prompt('bob', ARRAY['personal', 'work'], 4096)).prompt,
    E'[personal]\n- Bob prefers spaces\n',
    'bob''s prompt is built from bob''s generations only');
SELECT is(
    (prme.assemble_prompt(budget_bytes => 4096, scopes => ARRAY['work'], user_id => 'alice')).item_count, 1,
    'named notation');
UPDATE mark SET state = pg_temp.state();
SELECT throws_ok($$SELECT prme.assemble_prompt('alice', NULL, 100)$$, 'PR422', 'scopes must not be null', 'NULL scopes');
SELECT throws_ok($$SELECT prme.assemble_prompt('alice', '{}', 100)$$, 'PR422', NULL, 'empty scopes');
SELECT throws_ok($$SELECT prme.assemble_prompt('alice', ARRAY['ok', 'NOT OK'], 100)$$, 'PR422', NULL, 'a malformed scope');
SELECT throws_ok($$SELECT prme.assemble_prompt('alice', ARRAY['personal'], 0)$$, 'PR422',
                 'budget_bytes must be between 1 and 16777216', 'budget 0');
SELECT throws_ok($$SELECT prme.assemble_prompt('alice', ARRAY['personal'], NULL)$$, 'PR422', NULL, 'budget NULL');
SELECT throws_ok($$SELECT prme.assemble_prompt(NULL, ARRAY['personal'], 100)$$, 'PR422', NULL, 'NULL user_id');
SELECT is(pg_temp.state(), (SELECT state FROM mark), 'assemble_prompt writes nothing');

-- -----------------------------------------------------------------------------
-- 7. The tables keep generations immutable and the pointer forward
-- -----------------------------------------------------------------------------
SELECT throws_ok($$UPDATE prme.snapshot_generations SET item_count = item_count$$, 'PR422', NULL,
                 'UPDATE of a generation is refused');
SELECT throws_ok($$DELETE FROM prme.snapshot_generations$$, 'PR422', NULL, 'DELETE of a generation is refused');
SELECT throws_ok($$TRUNCATE prme.snapshot_generations CASCADE$$, 'PR422', NULL, 'TRUNCATE of generations is refused');
SELECT throws_ok($$UPDATE prme.snapshot_history SET advanced_at = now()$$, 'PR422', NULL, 'UPDATE of history is refused');
SELECT throws_ok($$DELETE FROM prme.snapshot_history$$, 'PR422', NULL, 'DELETE of history is refused');
SELECT throws_ok($$DELETE FROM prme.snapshot_heads$$, 'PR422', NULL, 'DELETE of a head is refused');
SELECT throws_ok(
    format('UPDATE prme.snapshot_heads SET seq = seq - 1, generation_id = %L WHERE user_id = %L AND scope = %L',
           (SELECT pg_temp.sha(body) FROM doc WHERE name = 'personal2'), 'alice', 'personal'),
    'PR422', 'prme.snapshot_heads only moves forward: seq + 1 to another generation of the same scope',
    'moving a head backward is refused');
SELECT throws_ok(
    $$INSERT INTO prme.snapshot_generations (user_id, scope, generation_id, document, item_count, byte_size, created_at)
      VALUES ('alice', 'personal', repeat('a', 64), '{"items":[]}', 0, 12, now())$$,
    '23514', NULL, 'a generation whose id is not the sha256 of its document cannot be stored');

-- A superuser can still get past the triggers and the CHECK; reads notice.
ALTER TABLE prme.snapshot_generations DISABLE TRIGGER snapshot_generations_append_only;
ALTER TABLE prme.snapshot_generations DROP CONSTRAINT snapshot_generations_content_addressed;
UPDATE prme.snapshot_generations SET document = replace(document, 'Berlin', 'Paris')
WHERE user_id = 'alice' AND scope = 'personal';
SELECT throws_ok($$SELECT prme.current_snapshot('alice', 'personal')$$, 'XX001', NULL,
                 'a tampered generation: current_snapshot raises data_corrupted');
SELECT throws_ok($$SELECT prme.assemble_prompt('alice', ARRAY['personal'], 4096)$$, 'XX001', NULL,
                 '... and so does assemble_prompt');

SELECT * FROM finish();
ROLLBACK;

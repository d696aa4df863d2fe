-- =============================================================================
-- test_bad_input.sql: bad input to every API function gets a clear error and
-- changes nothing; valid text full of SQL metacharacters is stored and read back
-- exactly (issue 2, "Bad input").
--
-- Every refused call goes through pg_temp.refused(sql, sqlstate, description),
-- which emits two assertions: throws_ok with the SQLSTATE (PR422 for invalid
-- arguments, PostgreSQL's own code where the server refuses first, e.g. 22P02 for
-- a malformed uuid), then "nothing changed": row counts and a digest of nodes,
-- events, journal and request_keys equal to before the call. (A refused call is
-- rolled back by PostgreSQL anyway; the second assertion catches a bad value that
-- is wrongly accepted and written.)
--
-- The cases are rows of a table, generated per argument x bad value, so adding an
-- API function or a bad value is one line; the plan counts 2 per case.
-- =============================================================================
BEGIN;
SELECT plan(455);

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

CREATE FUNCTION pg_temp.refused(p_sql text, p_sqlstate text, p_description text)
RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN
    UPDATE mark SET fp = pg_temp.fingerprint();
    RETURN NEXT throws_ok(p_sql, p_sqlstate::char(5), NULL, p_description);
    RETURN NEXT is(pg_temp.fingerprint(), (SELECT fp FROM mark), p_description || ': nothing changed');
END;
$$;

-- One row per refused call. `expr` columns below are SQL expressions, spliced
-- into the call with format('%s').
CREATE TEMP TABLE cases (n serial PRIMARY KEY, description text NOT NULL, sql text NOT NULL, sqlstate text NOT NULL);

-- Fixtures: a node and an event of alice to aim the calls at.
SELECT lives_ok($$
    SELECT prme.add_node('alice', 'tea', node_id => 'aaaaaaaa-0000-4000-8000-000000000001');
    SELECT prme.add_event('alice', 'said so', event_id => 'eeeeeeee-0000-4000-8000-0000000000a1');
$$, 'fixtures: a node and an event of alice');

-- -----------------------------------------------------------------------------
-- 1. user_id, in every API function
-- -----------------------------------------------------------------------------
INSERT INTO cases (description, sql, sqlstate)
SELECT format('%s: user_id %s', f.name, b.label), format(f.template, b.expr), 'PR422'
FROM (VALUES
        (1, 'add_node', 'SELECT prme.add_node(%s, ''content'')'),
        (2, 'add_event', 'SELECT prme.add_event(%s, ''content'')'),
        (3, 'get_node', 'SELECT prme.get_node(%s, ''aaaaaaaa-0000-4000-8000-000000000001'')'),
        (4, 'list_nodes', 'SELECT * FROM prme.list_nodes(%s)'),
        (5, 'reinforce', 'SELECT prme.reinforce(''aaaaaaaa-0000-4000-8000-000000000001'', %s)'),
        (6, 'archive_node', 'SELECT prme.archive_node(%s, ''aaaaaaaa-0000-4000-8000-000000000001'')'),
        (7, 'verify_journal', 'SELECT * FROM prme.verify_journal(%s)'),
        (8, 'replay_node', 'SELECT * FROM prme.replay_node(%s, ''aaaaaaaa-0000-4000-8000-000000000001'')')
     ) AS f(i, name, template)
CROSS JOIN (VALUES
        (1, 'NULL', 'NULL'),
        (2, 'empty', $v$''$v$),
        (3, 'with a leading space', $v$' alice'$v$),
        (4, 'with a trailing space', $v$'alice '$v$),
        (5, 'with a newline', $v$E'ali\nce'$v$),
        (6, 'with a tab', $v$E'alice\t'$v$),
        (7, 'with a control character', $v$E'\u0007alice'$v$),
        (8, 'of 257 characters', $v$repeat('u', 257)$v$),
        (9, 'of 300 characters', $v$repeat('u', 300)$v$)
     ) AS b(j, label, expr)
ORDER BY f.i, b.j;

-- -----------------------------------------------------------------------------
-- 2. scope, namespace, kind: ^[a-z][a-z0-9_-]{0,62}$
-- -----------------------------------------------------------------------------
INSERT INTO cases (description, sql, sqlstate)
SELECT format('%s: %s', f.name, b.label), format(f.template, b.expr), 'PR422'
FROM (VALUES
        (1, 'add_node scope', 'SELECT prme.add_node(''alice'', ''c'', scope => %s)'),
        (2, 'add_node namespace', 'SELECT prme.add_node(''alice'', ''c'', namespace => %s)'),
        (3, 'add_node kind', 'SELECT prme.add_node(''alice'', ''c'', kind => %s)'),
        (4, 'add_event scope', 'SELECT prme.add_event(''alice'', ''c'', scope => %s)'),
        (5, 'add_event namespace', 'SELECT prme.add_event(''alice'', ''c'', namespace => %s)'),
        (6, 'add_event kind', 'SELECT prme.add_event(''alice'', ''c'', kind => %s)'),
        (7, 'list_nodes namespace', 'SELECT * FROM prme.list_nodes(''alice'', namespace => %s)')
     ) AS f(i, name, template)
CROSS JOIN (VALUES
        (1, 'Personal (uppercase)', $v$'Personal'$v$),
        (2, '1abc (leading digit)', $v$'1abc'$v$),
        (3, '-abc (leading dash)', $v$'-abc'$v$),
        (4, 'a b (space)', $v$'a b'$v$),
        (5, '64 characters', $v$'a' || repeat('b', 63)$v$),
        (6, 'empty', $v$''$v$),
        (7, 'trailing newline', $v$E'abc\n'$v$),
        (8, 'non-ASCII letter', $v$E'caf\u00e9'$v$),
        (9, 'NULL', 'NULL')
     ) AS b(j, label, expr)
WHERE NOT (f.name = 'list_nodes namespace' AND b.label = 'NULL')  -- NULL there means "every namespace"
ORDER BY f.i, b.j;

-- -----------------------------------------------------------------------------
-- 3. Numbers: confidence_base and salience_base in [0, 1], at most 4 decimals; max_count
-- -----------------------------------------------------------------------------
INSERT INTO cases (description, sql, sqlstate)
SELECT format('add_node %s = %s', f.arg, b.label),
       format('SELECT prme.add_node(''alice'', ''c'', %s => %s)', f.arg, b.expr), 'PR422'
FROM (VALUES (1, 'confidence_base'), (2, 'salience_base')) AS f(i, arg)
CROSS JOIN (VALUES
        (1, '-0.01', '-0.01'),
        (2, '1.0001', '1.0001'),
        (3, 'NaN', $v$'NaN'$v$),
        (4, 'Infinity', $v$'Infinity'$v$),
        (5, '-Infinity', $v$'-Infinity'$v$),
        (6, '0.12345 (5 decimals)', '0.12345'),
        (7, 'NULL', 'NULL')
     ) AS b(j, label, expr)
ORDER BY f.i, b.j;

INSERT INTO cases (description, sql, sqlstate)
SELECT format('list_nodes max_count = %s', v), format('SELECT * FROM prme.list_nodes(''alice'', max_count => %s)', v), 'PR422'
FROM unnest(ARRAY['0', '-1', '10001', 'NULL']) WITH ORDINALITY AS u(v, i)
ORDER BY i;

-- -----------------------------------------------------------------------------
-- 4. content: non-blank, at most 65536 bytes
-- -----------------------------------------------------------------------------
INSERT INTO cases (description, sql, sqlstate)
SELECT format('%s content %s', f.name, b.label), format(f.template, b.expr), 'PR422'
FROM (VALUES
        (1, 'add_node', 'SELECT prme.add_node(''alice'', %s)'),
        (2, 'add_event', 'SELECT prme.add_event(''alice'', %s)')
     ) AS f(i, name, template)
CROSS JOIN (VALUES
        (1, 'NULL', 'NULL'),
        (2, 'empty', $v$''$v$),
        (3, 'of spaces', $v$'   '$v$),
        (4, 'of whitespace (tab, newline)', $v$E' \t\n\r '$v$),
        (5, 'of 65537 bytes', $v$repeat('x', 65537)$v$),
        (6, 'of 32769 two-byte characters (65538 bytes)', $v$repeat(E'\u00e9', 32769)$v$),
        (7, 'of 1 MB', $v$repeat('x', 1048576)$v$)
     ) AS b(j, label, expr)
ORDER BY f.i, b.j;

-- -----------------------------------------------------------------------------
-- 5. payload: a JSON object of at most 65536 bytes
-- -----------------------------------------------------------------------------
INSERT INTO cases (description, sql, sqlstate)
SELECT format('add_event payload %s', label), format('SELECT prme.add_event(''alice'', ''c'', payload => %s)', expr), 'PR422'
FROM (VALUES
        (1, 'NULL', 'NULL'),
        (2, 'an array', $v$'[]'$v$),
        (3, 'a string', $v$'"text"'$v$),
        (4, 'a number', $v$'1'$v$),
        (5, 'JSON null', $v$'null'$v$),
        (6, 'of more than 65536 bytes', $v$jsonb_build_object('k', repeat('x', 65536))$v$)
     ) AS b(j, label, expr)
ORDER BY j;

-- -----------------------------------------------------------------------------
-- 6. Times: finite, years 1..9999
-- -----------------------------------------------------------------------------
INSERT INTO cases (description, sql, sqlstate)
SELECT format('%s %s', f.name, b.label), format(f.template, b.expr), 'PR422'
FROM (VALUES
        (1, 'add_node next_review_at', 'SELECT prme.add_node(''alice'', ''c'', next_review_at => %s)'),
        (2, 'add_event occurred_at', 'SELECT prme.add_event(''alice'', ''c'', occurred_at => %s)')
     ) AS f(i, name, template)
CROSS JOIN (VALUES
        (1, 'infinity', $v$'infinity'$v$),
        (2, '-infinity', $v$'-infinity'$v$),
        (3, 'in year 10000', $v$'10000-01-01 00:00:00+00'$v$),
        (4, 'before year 1 (BC)', $v$'0001-12-31 23:59:59+00 BC'$v$)
     ) AS b(j, label, expr)
-- add_node's next_review_at => 'infinity' is valid: no review schedule (docs/MAINTENANCE.md).
WHERE NOT (f.i = 1 AND b.j = 1)
ORDER BY f.i, b.j;

-- -----------------------------------------------------------------------------
-- 7. stability and decay_profile: closed vocabularies
-- -----------------------------------------------------------------------------
INSERT INTO cases (description, sql, sqlstate)
SELECT format('add_node %s = %s', f.arg, b.label),
       format('SELECT prme.add_node(''alice'', ''c'', %s => %s)', f.arg, b.expr), 'PR422'
FROM (VALUES (1, 'stability', 'medium'), (2, 'decay_profile', 'stable')) AS f(i, arg, other_vocabulary)
CROSS JOIN LATERAL (VALUES
        (1, 'Capitalised', quote_literal(initcap(CASE f.arg WHEN 'stability' THEN 'stable' ELSE 'slow' END))),
        (2, 'a word of the other vocabulary', quote_literal(f.other_vocabulary)),
        (3, 'empty', $v$''$v$),
        (4, 'NULL', 'NULL')
     ) AS b(j, label, expr)
ORDER BY f.i, b.j;

-- -----------------------------------------------------------------------------
-- 8. UUIDs: malformed literals never reach a function (22P02); NULL ids are PR422
-- -----------------------------------------------------------------------------
INSERT INTO cases (description, sql, sqlstate)
SELECT format('%s: malformed %s', name, arg), sql, '22P02'
FROM (VALUES
        (1, 'add_node', 'node_id', $s$SELECT prme.add_node('alice', 'c', node_id => 'not-a-uuid')$s$),
        (2, 'add_event', 'event_id', $s$SELECT prme.add_event('alice', 'c', event_id => 'not-a-uuid')$s$),
        (3, 'get_node', 'node_id', $s$SELECT prme.get_node('alice', 'aaaaaaaa-0000-4000-8000-00000000000g')$s$),
        (4, 'list_nodes', 'after_node_id', $s$SELECT * FROM prme.list_nodes('alice', after_node_id => '')$s$),
        (5, 'reinforce', 'node_id', $s$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-0000000000011', 'alice')$s$),
        (6, 'reinforce', 'evidence_id', $s$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice', '{}')$s$),
        (7, 'reinforce', 'request_id', $s$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice', NULL, 'x')$s$),
        (8, 'archive_node', 'node_id', $s$SELECT prme.archive_node('alice', '''; DROP TABLE prme.nodes; --')$s$),
        (9, 'replay_node', 'node_id', $s$SELECT * FROM prme.replay_node('alice', 'aaaaaaaa')$s$)
     ) AS c(i, name, arg, sql)
ORDER BY i;

-- NULL for a required id is an invalid argument, as reinforce already treats it.
INSERT INTO cases (description, sql, sqlstate)
SELECT format('%s: NULL node_id', name), sql, 'PR422'
FROM (VALUES
        (1, 'reinforce', $s$SELECT prme.reinforce(NULL, 'alice')$s$),
        (2, 'get_node', $s$SELECT prme.get_node('alice', NULL)$s$),
        (3, 'archive_node', $s$SELECT prme.archive_node('alice', NULL)$s$),
        (4, 'replay_node', $s$SELECT * FROM prme.replay_node('alice', NULL)$s$)
     ) AS c(i, name, sql)
ORDER BY i;

-- Ids that are taken: a conflict, not a silent overwrite.
INSERT INTO cases (description, sql, sqlstate) VALUES
    ('add_node: node_id already taken',
     $s$SELECT prme.add_node('alice', 'other', node_id => 'aaaaaaaa-0000-4000-8000-000000000001')$s$, 'PR409'),
    ('add_event: event_id already taken',
     $s$SELECT prme.add_event('alice', 'other', event_id => 'eeeeeeee-0000-4000-8000-0000000000a1')$s$, 'PR409');

-- -----------------------------------------------------------------------------
-- 9. NUL bytes cannot reach a function: PostgreSQL refuses them itself
-- -----------------------------------------------------------------------------
INSERT INTO cases (description, sql, sqlstate) VALUES
    ('NUL in UTF-8 bytes: convert_from refuses it (22021)',
     $s$SELECT prme.add_node('alice', convert_from('\x6100'::bytea, 'UTF8'))$s$, '22021'),
    ('NUL via chr(0): refused (54000)',
     $s$SELECT prme.add_node('alice', 'a' || chr(0))$s$, '54000'),
    ('NUL as a \u0000 escape in a string literal: refused by the parser (42601)',
     $s$SELECT prme.add_node('alice', E'a\u0000b')$s$, '42601'),
    ('NUL as \u0000 in a jsonb payload: refused by jsonb (22P05)',
     $s$SELECT prme.add_event('alice', 'c', payload => '{"a": "\u0000"}')$s$, '22P05');

-- -----------------------------------------------------------------------------
-- 10. SQL metacharacters: refused where the syntax does not allow them
-- -----------------------------------------------------------------------------
CREATE TEMP TABLE meta (v text);
INSERT INTO meta VALUES ($m$o'brien"); DROP TABLE prme.nodes; -- \ \\ \n $$ $body$ %s %I %L ; /* */ \x00 ' || '$m$);
GRANT SELECT ON meta TO PUBLIC;

INSERT INTO cases (description, sql, sqlstate)
SELECT format('SQL metacharacters in %s', name), sql, 'PR422'
FROM (VALUES
        (1, 'add_node scope', $s$SELECT prme.add_node('alice', 'c', scope => (SELECT v FROM meta))$s$),
        (2, 'add_node namespace', $s$SELECT prme.add_node('alice', 'c', namespace => (SELECT v FROM meta))$s$),
        (3, 'add_node kind', $s$SELECT prme.add_node('alice', 'c', kind => (SELECT v FROM meta))$s$),
        (4, 'add_node stability', $s$SELECT prme.add_node('alice', 'c', stability => (SELECT v FROM meta))$s$),
        (5, 'add_node decay_profile', $s$SELECT prme.add_node('alice', 'c', decay_profile => (SELECT v FROM meta))$s$),
        (6, 'add_event scope', $s$SELECT prme.add_event('alice', 'c', scope => (SELECT v FROM meta))$s$),
        (7, 'add_event namespace', $s$SELECT prme.add_event('alice', 'c', namespace => (SELECT v FROM meta))$s$),
        (8, 'add_event kind', $s$SELECT prme.add_event('alice', 'c', kind => (SELECT v FROM meta))$s$),
        (9, 'list_nodes namespace', $s$SELECT * FROM prme.list_nodes('alice', (SELECT v FROM meta))$s$)
     ) AS c(i, name, sql)
ORDER BY i;

-- Run every case (two assertions each).
SELECT pg_temp.refused(sql, sqlstate, description) FROM cases ORDER BY n;

-- A few messages, checked word for word.
SELECT throws_ok($$SELECT prme.add_node(NULL, 'c')$$, 'PR422', 'user_id must not be null', 'message: NULL user_id');
SELECT throws_ok($$SELECT prme.add_node('alice', 'c', scope => 'Personal')$$, 'PR422',
                 'scope must match ^[a-z][a-z0-9_-]{0,62}$', 'message: bad scope names the argument and the rule');
SELECT throws_ok($$SELECT prme.add_node('alice', 'c', salience_base => 1.5)$$, 'PR422',
                 'salience_base must be a number in [0, 1] with at most 4 decimal places', 'message: out of range');
SELECT throws_ok($$SELECT prme.add_node('alice', repeat('x', 1048576))$$, 'PR422',
                 'content must be at most 65536 bytes', 'message: 1 MB of content');

-- -----------------------------------------------------------------------------
-- 11. Boundaries that are valid are accepted
-- -----------------------------------------------------------------------------
SELECT lives_ok($$SELECT prme.add_node(repeat('u', 256), 'c')$$, 'user_id of 256 characters is accepted');
SELECT lives_ok($$SELECT prme.add_node(E'\u00fcser-\u00e9', 'c')$$, 'a non-ASCII user_id is accepted');
SELECT lives_ok($$SELECT prme.add_node('alice', 'c', scope => 'a' || repeat('b', 62), namespace => 'a-b_c9', kind => 'z')$$,
                'names of 63 and 1 characters, with digits, dash and underscore, are accepted');
SELECT results_eq(
    $$SELECT confidence_base, salience_base FROM prme.add_node('alice', 'c', confidence_base => 0, salience_base => 1)
      UNION ALL
      SELECT confidence_base, salience_base FROM prme.add_node('alice', 'c', confidence_base => 0.1234, salience_base => 1.0000)$$,
    $$VALUES (0::numeric(5, 4), 1::numeric(5, 4)), (0.1234, 1)$$,
    'numbers 0, 1, 0.1234 and 1.0000 are accepted and stored exactly');
SELECT is(octet_length((prme.add_node('alice', repeat('x', 65536))).content), 65536,
          'content of exactly 65536 bytes is accepted');
SELECT is(octet_length((prme.add_event('alice', repeat(E'\u00e9', 32768))).content), 65536,
          'content of 32768 two-byte characters (65536 bytes) is accepted');
SELECT is((prme.add_node('alice', 'c', next_review_at => '9999-12-31 23:59:59.999999+00')).next_review_at,
          '9999-12-31 23:59:59.999999+00'::timestamptz, 'next_review_at at the end of year 9999 is accepted');
SELECT is((prme.add_event('alice', 'c', occurred_at => '0001-01-01 00:00:00+00')).occurred_at,
          '0001-01-01 00:00:00+00'::timestamptz, 'occurred_at at the start of year 1 is accepted');
SELECT is((SELECT count(*) FROM prme.list_nodes('alice', max_count => 10000)) > 0, true, 'max_count 10000 is accepted');

-- -----------------------------------------------------------------------------
-- 12. Valid text full of SQL metacharacters is stored and read back exactly
-- -----------------------------------------------------------------------------
SELECT lives_ok($$
    SELECT prme.add_node((SELECT v FROM meta), (SELECT v FROM meta), node_id => 'aaaaaaaa-0000-4000-8000-0000000000ee');
    SELECT prme.add_event((SELECT v FROM meta), (SELECT v FROM meta),
                          payload => jsonb_build_object((SELECT v FROM meta), (SELECT v FROM meta)),
                          event_id => 'eeeeeeee-0000-4000-8000-0000000000ee');
$$, 'add_node and add_event with SQL metacharacters in user_id, content and payload');
SELECT results_eq(
    $$SELECT user_id, content FROM prme.get_node((SELECT v FROM meta), 'aaaaaaaa-0000-4000-8000-0000000000ee')$$,
    $$SELECT v, v FROM meta$$,
    'get_node reads user_id and content back exactly');
SELECT results_eq(
    $$SELECT user_id, content, payload FROM prme.events WHERE id = 'eeeeeeee-0000-4000-8000-0000000000ee'$$,
    $$SELECT v, v, jsonb_build_object(v, v) FROM meta$$,
    'the event keeps user_id, content and payload exactly');
SELECT is((SELECT count(*) FROM prme.list_nodes((SELECT v FROM meta))), 1::bigint, 'list_nodes finds the node');
SELECT is(
    (prme.reinforce('aaaaaaaa-0000-4000-8000-0000000000ee', (SELECT v FROM meta), 'eeeeeeee-0000-4000-8000-0000000000ee',
                    'cccccccc-0000-4000-8000-0000000000ee')).version,
    2::bigint, 'reinforce works for that owner');
SELECT results_eq(
    $$SELECT j.record::jsonb ->> 'user_id', j.record::jsonb -> 'after' ->> 'content'
      FROM prme.journal AS j WHERE j.node_id = 'aaaaaaaa-0000-4000-8000-0000000000ee' ORDER BY j.node_version$$,
    $$SELECT v, v FROM meta UNION ALL SELECT v, v FROM meta$$,
    'the journal records carry the text exactly (valid JSON, correctly escaped)');
SELECT is_empty($$SELECT * FROM prme.verify_journal((SELECT v FROM meta))$$, 'verify_journal is clean for that owner');
SELECT is((prme.replay_node((SELECT v FROM meta), 'aaaaaaaa-0000-4000-8000-0000000000ee')).matches, true,
          'replay_node matches for that owner');
SELECT is((prme.archive_node((SELECT v FROM meta), 'aaaaaaaa-0000-4000-8000-0000000000ee')).lifecycle_state, 'archived',
          'archive_node works for that owner');
SELECT is(
    ARRAY[to_regclass('prme.nodes'), to_regclass('prme.events'), to_regclass('prme.journal'),
          to_regclass('prme.request_keys'), to_regclass('prme.schema_migrations')]::text[],
    ARRAY['prme.nodes', 'prme.events', 'prme.journal', 'prme.request_keys', 'prme.schema_migrations'],
    'every core table is still there (nothing was dropped by the metacharacters)');
SELECT is_empty($$SELECT * FROM prme.verify_journal('alice')$$, 'alice''s journal verifies after all of this');

SELECT * FROM finish();
ROLLBACK;

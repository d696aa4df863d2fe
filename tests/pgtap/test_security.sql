-- =============================================================================
-- test_security.sql: roles, privileges, row-level security and the catalog
-- rules of docs/DESIGN.md sections 2 and 5.
--
-- Proves: the four roles exist and cannot log in; prme_app has USAGE on the
-- schema and EXECUTE on exactly the API functions, nothing on any table or
-- internal helper; PUBLIC has nothing; API functions (and only they) are
-- SECURITY DEFINER, every function pins search_path = pg_catalog, pg_temp and
-- everything is owned by prme_owner; prme_reader sees the rows of the owners bound
-- to the reading role in prme.reader_bindings (directly or through a group), never
-- by setting prme.user_id, and cannot write; prme_auditor sees every owner's rows;
-- the whole flow works as prme_app; every table, function and type has a COMMENT;
-- every primary key, unique constraint, unique index and foreign key leads with user_id.
-- The catalog checks query pg_catalog, so objects added later are covered too.
-- =============================================================================
BEGIN;
SELECT plan(100);

-- The API is every function in prme whose name does not start with _ (docs/DESIGN.md
-- section 5), so functions added by later migrations are held to the same rules.
-- The core API of issue 2 must be among them.
CREATE TEMP VIEW api AS
SELECT p.oid, p.oid::regprocedure::text AS signature
FROM pg_proc AS p
WHERE p.pronamespace = 'prme'::regnamespace AND p.proname NOT LIKE '\_%';
GRANT SELECT ON api TO PUBLIC;

-- -----------------------------------------------------------------------------
-- 1. Roles and schema
-- -----------------------------------------------------------------------------
SELECT has_role('prme_owner');
SELECT has_role('prme_app');
SELECT has_role('prme_reader');
SELECT has_role('prme_auditor');
SELECT is_empty(
    $$SELECT rolname FROM pg_roles WHERE rolname IN ('prme_owner', 'prme_app', 'prme_reader', 'prme_auditor')
        AND (rolcanlogin OR rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls OR rolreplication)$$,
    'the prme roles cannot log in and have no special attributes (no BYPASSRLS)');
SELECT schema_owner_is('prme', 'prme_owner');
SELECT results_eq(
    $$SELECT r, has_schema_privilege(r, 'prme', 'USAGE'), has_schema_privilege(r, 'prme', 'CREATE')
      FROM unnest(ARRAY['prme_app', 'prme_reader', 'prme_auditor', 'public']) AS r$$,
    $$VALUES ('prme_app', true, false), ('prme_reader', true, false), ('prme_auditor', true, false),
             ('public', false, false)$$,
    'schema prme: USAGE for prme_app and the readers, nothing for PUBLIC, CREATE for nobody');
SELECT is_empty(
    $$SELECT c.oid::regclass::text FROM pg_class AS c WHERE c.relnamespace = 'prme'::regnamespace
        AND c.relowner <> 'prme_owner'::regrole
      UNION ALL
      SELECT p.oid::regprocedure::text FROM pg_proc AS p WHERE p.pronamespace = 'prme'::regnamespace
        AND p.proowner <> 'prme_owner'::regrole
      UNION ALL
      SELECT t.oid::regtype::text FROM pg_type AS t WHERE t.typnamespace = 'prme'::regnamespace
        AND t.typowner <> 'prme_owner'::regrole$$,
    'every relation, function and type in prme is owned by prme_owner');

-- -----------------------------------------------------------------------------
-- 2. Function privileges
-- -----------------------------------------------------------------------------
SELECT function_privs_are('prme', 'add_node',
    ARRAY['text', 'text', 'text', 'text', 'text', 'numeric', 'numeric', 'text', 'text', 'timestamp with time zone', 'uuid', 'real[]', 'text'],
    'prme_app', ARRAY['EXECUTE']);
SELECT function_privs_are('prme', 'add_event',
    ARRAY['text', 'text', 'text', 'text', 'text', 'jsonb', 'timestamp with time zone', 'uuid'], 'prme_app', ARRAY['EXECUTE']);
SELECT function_privs_are('prme', 'get_node', ARRAY['text', 'uuid'], 'prme_app', ARRAY['EXECUTE']);
SELECT function_privs_are('prme', 'list_nodes', ARRAY['text', 'text', 'uuid', 'integer'], 'prme_app', ARRAY['EXECUTE']);
SELECT function_privs_are('prme', 'reinforce', ARRAY['uuid', 'text', 'uuid', 'uuid'], 'prme_app', ARRAY['EXECUTE']);
SELECT function_privs_are('prme', 'archive_node', ARRAY['text', 'uuid'], 'prme_app', ARRAY['EXECUTE']);
SELECT function_privs_are('prme', 'verify_journal', ARRAY['text'], 'prme_app', ARRAY['EXECUTE']);
SELECT function_privs_are('prme', 'replay_node', ARRAY['text', 'uuid'], 'prme_app', ARRAY['EXECUTE']);
SELECT results_eq(
    $$SELECT p.oid::regprocedure::text FROM pg_proc AS p
      WHERE p.pronamespace = 'prme'::regnamespace AND has_function_privilege('prme_app', p.oid, 'EXECUTE')
      ORDER BY 1$$,
    $$SELECT signature FROM api ORDER BY 1$$,
    'prme_app executes exactly the API functions (every prme function not starting with _)');
SELECT set_has(
    $$SELECT signature FROM api$$,
    $$VALUES ('prme.add_node(text,text,text,text,text,numeric,numeric,text,text,timestamp with time zone,uuid,real[],text)'),
             ('prme.add_event(text,text,text,text,text,jsonb,timestamp with time zone,uuid)'),
             ('prme.get_node(text,uuid)'), ('prme.list_nodes(text,text,uuid,integer)'),
             ('prme.reinforce(uuid,text,uuid,uuid)'), ('prme.archive_node(text,uuid)'),
             ('prme.verify_journal(text)'), ('prme.replay_node(text,uuid)')$$,
    'the API includes the eight core functions');
SELECT is_empty(
    $$SELECT p.oid::regprocedure FROM pg_proc AS p
      WHERE p.pronamespace = 'prme'::regnamespace AND p.proname LIKE '\_%'
        AND has_function_privilege('prme_app', p.oid, 'EXECUTE')$$,
    'prme_app executes no internal helper (name starting with _)');
SELECT is_empty(
    $$SELECT p.oid::regprocedure FROM pg_proc AS p
      WHERE p.pronamespace = 'prme'::regnamespace AND has_function_privilege('public', p.oid, 'EXECUTE')$$,
    'PUBLIC executes no prme function');
SELECT is_empty(
    $$SELECT p.oid::regprocedure FROM pg_proc AS p
      WHERE p.pronamespace = 'prme'::regnamespace AND has_function_privilege('prme_reader', p.oid, 'EXECUTE')$$,
    'prme_reader executes no prme function: it only reads');
SELECT is_empty(
    $$SELECT p.oid::regprocedure FROM pg_proc AS p
      WHERE p.pronamespace = 'prme'::regnamespace AND has_function_privilege('prme_auditor', p.oid, 'EXECUTE')$$,
    'prme_auditor executes no prme function: it only reads');
SELECT results_eq(
    $$SELECT p.oid::regprocedure::text FROM pg_proc AS p
      WHERE p.pronamespace = 'prme'::regnamespace AND p.prosecdef ORDER BY 1$$,
    $$SELECT signature FROM api ORDER BY 1$$,
    'the API functions, and only they, are SECURITY DEFINER');
SELECT is_empty(
    $$SELECT p.oid::regprocedure FROM pg_proc AS p
      WHERE p.pronamespace = 'prme'::regnamespace
        AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')
        AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)$$,
    'every PL/pgSQL function in prme runs with search_path = pg_catalog, pg_temp');
SELECT is_empty(
    $$SELECT p.oid::regprocedure FROM pg_proc AS p
      WHERE p.pronamespace = 'prme'::regnamespace
        AND p.prolang NOT IN (SELECT oid FROM pg_language WHERE lanname IN ('plpgsql', 'sql'))$$,
    'prme functions are PL/pgSQL or SQL only (no untrusted languages)');

-- -----------------------------------------------------------------------------
-- 3. Table privileges and row-level security
-- -----------------------------------------------------------------------------
SELECT ok(
    (SELECT count(*) FROM pg_class WHERE relnamespace = 'prme'::regnamespace AND relkind IN ('r', 'p')
        AND relname IN ('schema_migrations', 'nodes', 'events', 'journal', 'request_keys')) = 5,
    'the five core tables are in prme (the catalog checks below are not vacuous)');
SELECT is_empty(
    $$SELECT c.oid::regclass, r, priv FROM pg_class AS c,
          unnest(ARRAY['prme_app', 'public']) AS r,
          unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS priv
      WHERE c.relnamespace = 'prme'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
        AND has_table_privilege(r, c.oid, priv)$$,
    'prme_app and PUBLIC have no privilege on any table, view or sequence in prme');
SELECT is_empty(
    $$SELECT c.oid::regclass, r FROM pg_class AS c, unnest(ARRAY['prme_app', 'public']) AS r
      WHERE c.relnamespace = 'prme'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
        AND has_any_column_privilege(r, c.oid, 'SELECT, INSERT, UPDATE, REFERENCES')$$,
    'prme_app and PUBLIC have no column privileges either');
SELECT results_eq(
    $$SELECT c.oid::regclass::text, priv FROM pg_class AS c,
          unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS priv
      WHERE c.relnamespace = 'prme'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
        AND has_table_privilege('prme_reader', c.oid, priv)
      ORDER BY 1, 2$$,
    $$VALUES ('prme.correction_inbox', 'SELECT'), ('prme.events', 'SELECT'), ('prme.journal', 'SELECT'),
             ('prme.maintenance_patches', 'SELECT'), ('prme.maintenance_settings', 'SELECT'),
             ('prme.nodes', 'SELECT'), ('prme.operation_events', 'SELECT'),
             ('prme.operation_parts', 'SELECT'), ('prme.operations', 'SELECT'), ('prme.outcomes', 'SELECT'),
             ('prme.patch_ops', 'SELECT'), ('prme.reader_bindings', 'SELECT'), ('prme.snapshot_generations', 'SELECT'),
             ('prme.snapshot_heads', 'SELECT'), ('prme.snapshot_history', 'SELECT')$$,
    'prme_reader: SELECT on the owners'' tables but request_keys and api_tokens, and its bindings; nothing else');
SELECT results_eq(
    $$SELECT c.oid::regclass::text, priv FROM pg_class AS c,
          unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS priv
      WHERE c.relnamespace = 'prme'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
        AND has_table_privilege('prme_auditor', c.oid, priv)
      ORDER BY 1, 2$$,
    $$SELECT c.oid::regclass::text, 'SELECT' FROM pg_class AS c
      WHERE c.relnamespace = 'prme'::regnamespace AND c.relkind IN ('r', 'p')
        AND has_table_privilege('prme_reader', c.oid, 'SELECT')
      ORDER BY 1$$,
    'prme_auditor: SELECT on exactly the tables prme_reader may read');
-- The reader's policy reads the bindings: the same expression on every table.
CREATE TEMP VIEW reader_policy AS
SELECT pg_get_expr(p.polqual, p.polrelid) AS qual FROM pg_policy AS p WHERE p.polname = 'nodes_reader_owner';
SELECT ok(
    (SELECT qual LIKE '%prme.reader_bindings%pg_has_role(%''USAGE''%' AND qual NOT LIKE '%current_setting%'
     FROM reader_policy),
    'prme_reader''s owner policy reads the bindings of roles the reader has the privileges of, no setting');
SELECT is_empty(
    $$SELECT c.oid::regclass FROM pg_class AS c
      WHERE c.relnamespace = 'prme'::regnamespace AND c.relkind IN ('r', 'p')
        AND has_table_privilege('prme_reader', c.oid, 'SELECT') AND c.oid <> 'prme.reader_bindings'::regclass
        AND NOT EXISTS (
            SELECT FROM pg_policy AS p
            WHERE p.polrelid = c.oid AND p.polcmd = 'r' AND p.polroles = ARRAY['prme_reader'::regrole::oid]
              AND pg_get_expr(p.polqual, p.polrelid) = (SELECT qual FROM reader_policy)
        )$$,
    'every table prme_reader may read has that owner policy');
SELECT is_empty(
    $$SELECT p.polrelid::regclass, p.polname FROM pg_policy AS p
      WHERE p.polroles && ARRAY['prme_reader'::regrole::oid, 'prme_auditor'::regrole::oid, 0::oid]
        AND (p.polcmd <> 'r' OR cardinality(p.polroles) <> 1 OR NOT p.polpermissive)$$,
    'the readers'' policies are permissive, FOR SELECT, each for one role (never PUBLIC)');
SELECT is_empty(
    $$SELECT c.oid::regclass FROM pg_class AS c
      WHERE c.relnamespace = 'prme'::regnamespace AND c.relkind IN ('r', 'p')
        AND has_table_privilege('prme_auditor', c.oid, 'SELECT')
        AND NOT EXISTS (
            SELECT FROM pg_policy AS p
            WHERE p.polrelid = c.oid AND p.polcmd = 'r' AND p.polroles = ARRAY['prme_auditor'::regrole::oid]
              AND pg_get_expr(p.polqual, p.polrelid) = 'true'
        )$$,
    'every table prme_auditor may read has its all-owners policy');
SELECT is_empty(
    $$SELECT c.oid::regclass FROM pg_class AS c
      WHERE c.relnamespace = 'prme'::regnamespace AND c.relkind IN ('r', 'p')
        AND (has_table_privilege('prme_reader', c.oid, 'SELECT') OR has_table_privilege('prme_auditor', c.oid, 'SELECT'))
        AND NOT c.relrowsecurity$$,
    'every table prme_reader or prme_auditor may read has row-level security enabled');

-- Fixtures (as the superuser): alice has two nodes, bob one; journal rows for each.
SELECT lives_ok($$
    SELECT prme.add_node('alice', 'alice one', node_id => 'aaaaaaaa-0000-4000-8000-000000000001');
    SELECT prme.add_node('alice', 'alice two', node_id => 'aaaaaaaa-0000-4000-8000-000000000002');
    SELECT prme.add_node('bob', 'bob one', node_id => 'bbbbbbbb-0000-4000-8000-000000000001');
    SELECT prme.add_event('alice', 'alice said', event_id => 'eeeeeeee-0000-4000-8000-0000000000a1');
    SELECT prme.add_event('bob', 'bob said', event_id => 'eeeeeeee-0000-4000-8000-0000000000b1');
    SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice',
                          'eeeeeeee-0000-4000-8000-0000000000a1', 'cccccccc-0000-4000-8000-000000000001');
$$, 'fixtures: nodes, events and journal rows of alice and bob');

CREATE FUNCTION pg_temp.visible() RETURNS text LANGUAGE sql AS $$
    SELECT format('nodes=%s events=%s journal=%s',
        (SELECT coalesce(string_agg(DISTINCT user_id, ',') || ':' || count(*), '0') FROM prme.nodes),
        (SELECT coalesce(string_agg(DISTINCT user_id, ',') || ':' || count(*), '0') FROM prme.events),
        (SELECT coalesce(string_agg(DISTINCT user_id, ',') || ':' || count(*), '0') FROM prme.journal))
$$;

-- Roles of this test (rolled back with it): alice's reader, a group bound to bob and
-- a member of it, an auditor.
CREATE ROLE prme_t_alice_reader IN ROLE prme_reader;
CREATE ROLE prme_t_bob_team IN ROLE prme_reader;
CREATE ROLE prme_t_bob_lead IN ROLE prme_t_bob_team;
CREATE ROLE prme_t_auditor IN ROLE prme_auditor;
INSERT INTO prme.reader_bindings (user_id, reader) VALUES ('alice', 'prme_t_alice_reader'), ('bob', 'prme_t_bob_team');

SET LOCAL ROLE prme_reader;
SET LOCAL prme.user_id = 'alice';
SELECT is(pg_temp.visible(), 'nodes=0 events=0 journal=0',
          'prme_reader bound to no owner sees nothing, whatever prme.user_id says');
RESET ROLE;
SET LOCAL ROLE prme_t_alice_reader;
SELECT is(pg_temp.visible(), 'nodes=alice:2 events=alice:1 journal=alice:3',
          'a role bound to alice sees only alice''s nodes, events and journal');
SELECT is_empty($$SELECT * FROM prme.nodes WHERE user_id = 'bob'$$,
                '... and asking for bob''s rows by name returns nothing');
SET LOCAL prme.user_id = 'bob';
SELECT is(pg_temp.visible(), 'nodes=alice:2 events=alice:1 journal=alice:3',
          '... and setting prme.user_id to bob changes nothing');
SELECT results_eq($$SELECT user_id, reader::text FROM prme.reader_bindings$$,
                  $$VALUES ('alice', 'prme_t_alice_reader')$$, '... it sees its own binding, no other');
SELECT throws_ok($$INSERT INTO prme.reader_bindings (user_id, reader) VALUES ('bob', 'prme_t_alice_reader')$$,
                 '42501', NULL, '... and cannot bind itself to another owner');
RESET ROLE;
SET LOCAL ROLE prme_t_bob_lead;
SELECT is(pg_temp.visible(), 'nodes=bob:1 events=bob:1 journal=bob:1',
          'a member of a group bound to bob sees bob''s rows');
RESET ROLE;
INSERT INTO prme.reader_bindings (user_id, reader) VALUES ('bob', 'prme_t_alice_reader');
SET LOCAL ROLE prme_t_alice_reader;
SELECT is(pg_temp.visible(), 'nodes=alice,bob:3 events=alice,bob:2 journal=alice,bob:4',
          'a role bound to alice and bob sees both');
RESET ROLE;
SET LOCAL ROLE prme_t_auditor;
SELECT is(pg_temp.visible(), 'nodes=alice,bob:3 events=alice,bob:2 journal=alice,bob:4',
          'prme_auditor sees every owner''s rows');
SELECT is((SELECT count(*) FROM prme.reader_bindings), 3::bigint, '... and every binding');
SELECT throws_ok($$SELECT * FROM prme.api_tokens$$, '42501', NULL, '... but never the API tokens');
SELECT throws_ok($$DELETE FROM prme.nodes$$, '42501', NULL, '... and cannot DELETE');
RESET ROLE;
-- A binding follows the role, not its name: a new role of the same name is not bound.
CREATE ROLE prme_t_gone IN ROLE prme_reader;
INSERT INTO prme.reader_bindings (user_id, reader) VALUES ('alice', 'prme_t_gone');
DROP ROLE prme_t_gone;
CREATE ROLE prme_t_gone IN ROLE prme_reader;
SET LOCAL ROLE prme_t_gone;
SELECT is(pg_temp.visible(), 'nodes=0 events=0 journal=0',
          'a role created with the name of a dropped, bound role sees nothing');
RESET ROLE;
SET LOCAL ROLE prme_t_alice_reader;
SELECT throws_ok($$INSERT INTO prme.nodes (id, user_id, content, created_at, updated_at, version, last_checksum)
                   VALUES (gen_random_uuid(), 'alice', 'x', now(), now(), 1, repeat('0', 64))$$,
                 '42501', NULL, 'prme_reader cannot INSERT into nodes');
SELECT throws_ok($$UPDATE prme.nodes SET content = 'x'$$, '42501', NULL, 'prme_reader cannot UPDATE nodes');
SELECT throws_ok($$DELETE FROM prme.nodes$$, '42501', NULL, 'prme_reader cannot DELETE from nodes');
SELECT throws_ok($$DELETE FROM prme.events$$, '42501', NULL, 'prme_reader cannot DELETE from events');
SELECT throws_ok($$INSERT INTO prme.journal SELECT * FROM prme.journal$$, '42501', NULL,
                 'prme_reader cannot INSERT into journal');
SELECT throws_ok($$SELECT * FROM prme.request_keys$$, '42501', NULL, 'prme_reader cannot read request_keys');
SELECT throws_ok($$DELETE FROM prme.reader_bindings$$, '42501', NULL, 'prme_reader cannot remove bindings');
SELECT throws_ok($$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'alice')$$, '42501', NULL,
                 'prme_reader cannot call reinforce');
SELECT throws_ok($$SELECT prme.add_node('alice', 'planted by the reader')$$, '42501', NULL,
                 'prme_reader cannot call add_node');
-- A read-only role that could call any SECURITY DEFINER API function would be a
-- writer in disguise; this one would even let it act as any owner over HTTP.
SELECT throws_ok($$SELECT prme.create_api_token('alice', repeat('a', 64), 'planted by the reader')$$,
                 '42501', NULL, 'prme_reader cannot register an API token for alice');
RESET ROLE;

-- -----------------------------------------------------------------------------
-- 4. As prme_app: the whole flow works, and nothing else does
-- -----------------------------------------------------------------------------
SET LOCAL ROLE prme_app;
SELECT is(
    (prme.add_node('carol', 'carol likes tea', node_id => 'cccccccc-aaaa-4000-8000-000000000001')).version,
    1::bigint, 'prme_app: add_node');
SELECT is(
    (prme.add_event('carol', 'carol said so', event_id => 'cccccccc-eeee-4000-8000-000000000001')).id,
    'cccccccc-eeee-4000-8000-000000000001'::uuid, 'prme_app: add_event');
SELECT results_eq(
    $$SELECT replayed, version FROM prme.reinforce('cccccccc-aaaa-4000-8000-000000000001', 'carol',
          'cccccccc-eeee-4000-8000-000000000001', 'cccccccc-0000-4000-8000-000000000001')$$,
    $$VALUES (false, 2::bigint)$$,
    'prme_app: reinforce');
SELECT results_eq(
    $$SELECT replayed, version FROM prme.reinforce('cccccccc-aaaa-4000-8000-000000000001', 'carol',
          'cccccccc-eeee-4000-8000-000000000001', 'cccccccc-0000-4000-8000-000000000001')$$,
    $$VALUES (true, 2::bigint)$$,
    'prme_app: reinforce replay');
SELECT is(
    (prme.get_node('carol', 'cccccccc-aaaa-4000-8000-000000000001')).evidence_refs,
    '{cccccccc-eeee-4000-8000-000000000001}'::uuid[], 'prme_app: get_node');
SELECT is(
    (SELECT count(*) FROM prme.list_nodes('carol')), 1::bigint, 'prme_app: list_nodes');
SELECT is(
    (SELECT count(*) FROM prme.node_journal('carol', 'cccccccc-aaaa-4000-8000-000000000001')), 2::bigint,
    'prme_app: node_journal');
SELECT is(
    (SELECT array_agg(id) FROM prme.node_evidence('carol', 'cccccccc-aaaa-4000-8000-000000000001')),
    '{cccccccc-eeee-4000-8000-000000000001}'::uuid[], 'prme_app: node_evidence');
SELECT is(
    (SELECT count(*) FROM prme.node_outcomes('carol', 'cccccccc-aaaa-4000-8000-000000000001')), 1::bigint,
    'prme_app: node_outcomes');
SELECT is(
    (SELECT array_agg(content) FROM prme.find_nodes('carol', 'tea')), '{"carol likes tea"}'::text[],
    'prme_app: find_nodes');
SELECT throws_ok($$SELECT * FROM prme.node_journal('dave', 'cccccccc-aaaa-4000-8000-000000000001')$$, 'PR404',
                 'node not found', 'prme_app: node_journal of another owner''s memory is not found');
SELECT is_empty($$SELECT * FROM prme.verify_journal('carol')$$, 'prme_app: verify_journal');
SELECT is((prme.replay_node('carol', 'cccccccc-aaaa-4000-8000-000000000001')).matches, true, 'prme_app: replay_node');
SELECT is((prme.archive_node('carol', 'cccccccc-aaaa-4000-8000-000000000001')).lifecycle_state, 'archived',
          'prme_app: archive_node');
SELECT throws_ok($$SELECT prme.get_node('carol', 'aaaaaaaa-0000-4000-8000-000000000001')$$, 'PR404', 'node not found',
                 'prme_app: another owner''s node is not found');
-- Every function that takes user_id treats another owner's rows as absent.
SELECT throws_ok($$SELECT prme.get_node('bob', 'aaaaaaaa-0000-4000-8000-000000000001')$$, 'PR404', 'node not found',
                 'prme_app: get_node of alice''s node as bob is not found');
SELECT throws_ok($$SELECT prme.archive_node('bob', 'aaaaaaaa-0000-4000-8000-000000000001')$$, 'PR404', 'node not found',
                 'prme_app: archive_node of alice''s node as bob is not found');
SELECT throws_ok($$SELECT * FROM prme.replay_node('bob', 'aaaaaaaa-0000-4000-8000-000000000001')$$, 'PR404', 'node not found',
                 'prme_app: replay_node of alice''s node as bob is not found');
SELECT throws_ok($$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000001', 'bob')$$, 'PR404', 'node not found',
                 'prme_app: reinforce of alice''s node as bob is not found');
SELECT results_eq($$SELECT id FROM prme.list_nodes('bob')$$, $$VALUES ('bbbbbbbb-0000-4000-8000-000000000001'::uuid)$$,
                  'prme_app: list_nodes as bob lists bob''s node only');
SELECT is(
    (SELECT count(*) FROM prme.verify_journal('bob') WHERE node_id::text LIKE 'aaaaaaaa%'), 0::bigint,
    'prme_app: verify_journal as bob says nothing about alice''s nodes');
SELECT is((prme.get_node('alice', 'aaaaaaaa-0000-4000-8000-000000000001')).lifecycle_state, 'active',
          'alice''s node is untouched by bob''s attempts');
SELECT throws_ok($$SELECT * FROM prme.nodes$$, '42501', NULL, 'prme_app cannot read nodes directly');
SELECT throws_ok($$SELECT * FROM prme.journal$$, '42501', NULL, 'prme_app cannot read the journal directly');
SELECT throws_ok($$INSERT INTO prme.reader_bindings (user_id, reader) VALUES ('alice', 'prme_app')$$,
                 '42501', NULL, 'prme_app cannot bind a reader');
SELECT throws_ok($$UPDATE prme.nodes SET confidence_base = 1$$, '42501', NULL, 'prme_app cannot UPDATE nodes');
SELECT throws_ok($$INSERT INTO prme.request_keys (user_id, namespace, request_id, operation, node_id, node_version, created_at)
                   VALUES ('carol', 'default', gen_random_uuid(), 'reinforce', gen_random_uuid(), 1, now())$$,
                 '42501', NULL, 'prme_app cannot write request_keys');
SELECT throws_ok($$SELECT prme._valid_user_id('carol')$$, '42501', NULL, 'prme_app cannot call _valid_user_id');
SELECT throws_ok($$SELECT prme._reinforced_boost(0)$$, '42501', NULL, 'prme_app cannot call _reinforced_boost');
SELECT throws_ok($$SELECT prme._journal_entry('create', NULL, gen_random_uuid(), NULL, NULL, NULL, NULL)$$,
                 '42501', NULL, 'prme_app cannot call _journal_entry');
SELECT throws_ok($$CREATE FUNCTION prme.add_node_hook() RETURNS int LANGUAGE sql AS 'SELECT 1'$$,
                 '42501', NULL, 'prme_app cannot create objects in schema prme');
RESET ROLE;

-- -----------------------------------------------------------------------------
-- 5. Comments and the user_id-first rule, over the whole catalog
-- -----------------------------------------------------------------------------
SELECT is_empty(
    $$SELECT c.oid::regclass FROM pg_class AS c
      WHERE c.relnamespace = 'prme'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
        AND obj_description(c.oid, 'pg_class') IS NULL$$,
    'every table and view in prme has a COMMENT');
SELECT is_empty(
    $$SELECT p.oid::regprocedure FROM pg_proc AS p
      WHERE p.pronamespace = 'prme'::regnamespace AND obj_description(p.oid, 'pg_proc') IS NULL$$,
    'every function in prme has a COMMENT');
SELECT is_empty(
    $$SELECT t.oid::regtype FROM pg_type AS t JOIN pg_class AS c ON c.oid = t.typrelid
      WHERE t.typnamespace = 'prme'::regnamespace AND c.relkind = 'c'
        AND obj_description(t.oid, 'pg_type') IS NULL$$,
    'every composite type in prme has a COMMENT');
SELECT is_empty(
    $$SELECT c.oid::regclass FROM pg_class AS c
      WHERE c.relnamespace = 'prme'::regnamespace AND c.relkind IN ('r', 'p')
        AND c.oid <> 'prme.schema_migrations'::regclass
        AND NOT EXISTS (
            SELECT FROM pg_attribute AS a
            WHERE a.attrelid = c.oid AND a.attname = 'user_id' AND a.atttypid = 'text'::regtype
              AND a.attnotnull AND NOT a.attisdropped)$$,
    'every table but schema_migrations has user_id text NOT NULL');
SELECT set_has(
    $$SELECT conrelid::regclass::text, contype::text FROM pg_constraint
      WHERE connamespace = 'prme'::regnamespace AND contype IN ('p', 'u', 'f')
        AND conrelid <> 'prme.schema_migrations'::regclass$$,
    $$VALUES ('prme.nodes', 'p'), ('prme.events', 'p'), ('prme.journal', 'p'),
             ('prme.request_keys', 'p'), ('prme.request_keys', 'f')$$,
    'the key checks below see the core keys: four primary keys and a foreign key');
SELECT is_empty(
    $$SELECT k.conrelid::regclass, k.conname FROM pg_constraint AS k
      WHERE k.connamespace = 'prme'::regnamespace AND k.contype IN ('p', 'u', 'f')
        AND k.conrelid <> 'prme.schema_migrations'::regclass
        AND (SELECT a.attname FROM pg_attribute AS a
             WHERE a.attrelid = k.conrelid AND a.attnum = k.conkey[1]) IS DISTINCT FROM 'user_id'$$,
    'every primary key, unique constraint and foreign key leads with user_id');
SELECT is_empty(
    $$SELECT k.conrelid::regclass, k.conname FROM pg_constraint AS k
      WHERE k.connamespace = 'prme'::regnamespace AND k.contype = 'f'
        AND (SELECT a.attname FROM pg_attribute AS a
             WHERE a.attrelid = k.confrelid AND a.attnum = k.confkey[1]) IS DISTINCT FROM 'user_id'$$,
    'every foreign key references a key that leads with user_id');
SELECT is_empty(
    $$SELECT i.indexrelid::regclass FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indrelid
      WHERE c.relnamespace = 'prme'::regnamespace AND i.indisunique
        AND i.indrelid <> 'prme.schema_migrations'::regclass
        AND (i.indkey[0] = 0 OR (SELECT a.attname FROM pg_attribute AS a
                                  WHERE a.attrelid = i.indrelid AND a.attnum = i.indkey[0]) IS DISTINCT FROM 'user_id')$$,
    'every unique index (including ones without a constraint) leads with user_id');

-- -----------------------------------------------------------------------------
-- 6. Default privileges: a function added later is not executable by PUBLIC
-- -----------------------------------------------------------------------------
SET LOCAL ROLE prme_owner;
CREATE FUNCTION prme._probe() RETURNS integer LANGUAGE sql AS 'SELECT 1';
RESET ROLE;
SELECT is(has_function_privilege('public', 'prme._probe()', 'EXECUTE'), false,
          'a function prme_owner adds later is not executable by PUBLIC (default privileges)');
SELECT is(has_function_privilege('prme_app', 'prme._probe()', 'EXECUTE'), false,
          '... nor by prme_app');
DROP FUNCTION prme._probe();

SELECT * FROM finish();
ROLLBACK;

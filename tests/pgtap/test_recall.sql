-- =============================================================================
-- test_recall.sql: virtual decay and prme.recall (docs/RECALL.md).
--
-- Proves: effective salience and confidence follow the formulas of issue 8 for
-- every decay profile, from last_reinforced_at or else created_at, clamped to
-- [0, 1], never negative in age, never underflowing, and never written back;
-- the search column is written once by add_node (a plain column: content never
-- changes, and a generated one would be recomputed by every UPDATE), indexed with
-- user_id first and absent from journal states; recall pins its ranking on a fixed corpus (score =
-- relevance * (0.5 + 0.25 salience + 0.25 confidence), ties by id), excludes
-- archived and deprecated memories and every other owner, filters by scope,
-- ranks by strength alone without a query, changes with as_of and with
-- confirmations; bad arguments raise PR422.
--
-- Time is frozen: the corpus is created at T0 = 2025-01-01 00:00 UTC and recall
-- is asked "as of" explicit times. Fixed ids: aaaaaaaa-...-0000000000NN alice,
-- bbbbbbbb-... bob.
-- =============================================================================
BEGIN;
SELECT plan(53);

-- A memory with any values and times, with a genuine create record (so the
-- journal of the corpus still verifies).
CREATE FUNCTION pg_temp.seed(
    p_user text, p_id text, p_content text, p_profile text, p_salience numeric, p_boost numeric,
    p_confidence numeric, p_state text DEFAULT 'active', p_scope text DEFAULT 'personal',
    p_reinforced timestamptz DEFAULT NULL
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v prme.nodes;
    e prme.journal;
BEGIN
    v.id := p_id::uuid; v.user_id := p_user; v.namespace := 'default'; v.scope := p_scope; v.kind := 'fact';
    v.content := p_content; v.confidence_base := p_confidence; v.salience_base := p_salience;
    v.reinforcement_boost := p_boost; v.evidence_refs := '{}'; v.stability := 'low';
    v.lifecycle_state := p_state; v.decay_profile := p_profile; v.last_reinforced_at := p_reinforced;
    v.created_at := '2025-01-01 00:00:00+00'; v.updated_at := v.created_at; v.version := 1;
    e := prme._journal_entry('create', NULL, gen_random_uuid(), NULL, NULL, NULL, v);
    v.last_checksum := e.checksum;
    INSERT INTO prme.nodes (
        id, user_id, namespace, scope, kind, content, confidence_base, salience_base, reinforcement_boost,
        last_reinforced_at, evidence_refs, stability, next_review_at, lifecycle_state, decay_profile,
        created_at, updated_at, version, last_checksum, search
    ) VALUES (
        v.id, v.user_id, v.namespace, v.scope, v.kind, v.content, v.confidence_base, v.salience_base,
        v.reinforcement_boost, v.last_reinforced_at, v.evidence_refs, v.stability, v.next_review_at,
        v.lifecycle_state, v.decay_profile, v.created_at, v.updated_at, v.version, v.last_checksum,
        array_to_tsvector(prme._owner_lexemes(v.user_id, v.content))
    );
    INSERT INTO prme.journal SELECT e.*;
END;
$$;

-- Every stored byte of the test owners' nodes, including where each row lives.
CREATE FUNCTION pg_temp.nodes_fingerprint() RETURNS text LANGUAGE sql AS $$
    SELECT md5(string_agg(n.ctid::text || n.xmin::text || n::text, '|' ORDER BY n.user_id, n.id))
    FROM prme.nodes AS n WHERE n.user_id IN ('alice', 'bob', 'decay')
$$;

-- -----------------------------------------------------------------------------
-- 1. Decay formulas, per profile (t = 10 days; salience 0.8, boost 0.2, confidence 0.9)
-- -----------------------------------------------------------------------------
SELECT pg_temp.seed('decay', 'dddddddd-0000-4000-8000-000000000001', 'p', 'permanent', 0.8, 0.2, 0.9);
SELECT pg_temp.seed('decay', 'dddddddd-0000-4000-8000-000000000002', 's', 'slow', 0.8, 0.2, 0.9);
SELECT pg_temp.seed('decay', 'dddddddd-0000-4000-8000-000000000003', 'm', 'medium', 0.8, 0.2, 0.9);
SELECT pg_temp.seed('decay', 'dddddddd-0000-4000-8000-000000000004', 'f', 'fast', 0.8, 0.2, 0.9);
SELECT pg_temp.seed('decay', 'dddddddd-0000-4000-8000-000000000005', 'r', 'rapid', 0.8, 0.2, 0.9);
-- Confirmed 7.5 days after creation: t counts from the confirmation (2.5 days).
SELECT pg_temp.seed('decay', 'dddddddd-0000-4000-8000-000000000006', 'c', 'medium', 0.8, 0.2, 0.9,
                    p_reinforced => '2025-01-08 12:00:00+00');
-- Already above 1 at t = 0, and an extreme base for the clamp.
SELECT pg_temp.seed('decay', 'dddddddd-0000-4000-8000-000000000007', 'x', 'permanent', 1, 0.5, 1);

SELECT results_eq(
    $$SELECT decay_profile, round(age_days::numeric, 9), round(effective_salience::numeric, 9),
             round(effective_confidence::numeric, 9)
      FROM prme.effective_nodes('decay', '2025-01-11 00:00:00+00')
      WHERE id <= 'dddddddd-0000-4000-8000-000000000005' ORDER BY id$$,
    $$VALUES ('permanent', 10.000000000, 0.873575888, 0.900000000),
             ('slow', 10.000000000, 0.834559428, 0.877778921),
             ('medium', 10.000000000, 0.728560491, 0.814353676),
             ('fast', 10.000000000, 0.470844131, 0.634219281),
             ('rapid', 10.000000000, 0.181844115, 0.331091497)$$,
    'effective salience = s e^(-λt) + b e^(-0.1t) and confidence = c e^(-λt/2) for every profile at t = 10 days');
SELECT results_eq(
    $$SELECT decay_from, round(age_days::numeric, 9), round(effective_salience::numeric, 9),
             round(effective_confidence::numeric, 9)
      FROM prme.effective_nodes('decay', '2025-01-11 00:00:00+00') WHERE id = 'dddddddd-0000-4000-8000-000000000006'$$,
    $$VALUES ('2025-01-08 12:00:00+00'::timestamptz, 2.500000000, 0.916743696, 0.877778921)$$,
    't counts from last_reinforced_at when the memory was confirmed');
SELECT results_eq(
    $$SELECT effective_salience, effective_confidence FROM prme.effective_nodes('decay', '2025-01-01 00:00:00+00')
      WHERE id = 'dddddddd-0000-4000-8000-000000000007'$$,
    $$VALUES (1::double precision, 1::double precision)$$,
    'salience 1 + boost 0.5 is clamped to 1');
SELECT results_eq(
    $$SELECT age_days, effective_salience, effective_confidence FROM prme.effective_nodes('decay', '2024-06-01 00:00:00+00')
      WHERE id = 'dddddddd-0000-4000-8000-000000000003'$$,
    $$VALUES (0::double precision, 1::double precision, 0.9::double precision)$$,
    'as_of before the reference time counts as t = 0 (no growth into the past)');
SELECT results_eq(
    $$SELECT decay_profile, effective_salience, effective_confidence FROM prme.effective_nodes('decay', '9999-12-31 00:00:00+00')
      WHERE id IN ('dddddddd-0000-4000-8000-000000000001', 'dddddddd-0000-4000-8000-000000000005') ORDER BY id$$,
    $$VALUES ('permanent', 0.8::double precision, 0.9::double precision),
             ('rapid', 0::double precision, 0::double precision)$$,
    'after 8,000 years: permanent keeps its base, rapid is exactly 0 (no float underflow error)');
SELECT is(
    (SELECT count(*) FROM prme.effective_nodes('decay', max_count => 3)), 3::bigint,
    'effective_nodes pages: max_count');
SELECT is(
    (SELECT array_agg(id ORDER BY id)::text[] FROM prme.effective_nodes('decay', NULL, 'dddddddd-0000-4000-8000-000000000005')),
    ARRAY['dddddddd-0000-4000-8000-000000000006', 'dddddddd-0000-4000-8000-000000000007'],
    '... and continues after after_node_id; as_of NULL means now');
SELECT throws_ok($$SELECT * FROM prme.effective_nodes('decay', max_count => 0)$$, 'PR422',
                 'max_count must be between 1 and 10000', 'effective_nodes: max_count 0 is PR422');
SELECT throws_ok($$SELECT * FROM prme.effective_nodes('decay', 'infinity')$$, 'PR422', NULL,
                 'effective_nodes: as_of infinity is PR422');

-- -----------------------------------------------------------------------------
-- 2. The search column: written once, indexed with user_id first, not journaled
-- -----------------------------------------------------------------------------
SELECT is(
    (SELECT attgenerated::text FROM pg_attribute WHERE attrelid = 'prme.nodes'::regclass AND attname = 'search'),
    '', 'nodes.search is a plain column, not a generated one (recomputed by every UPDATE)');
SELECT is(
    (SELECT indexdef FROM pg_indexes WHERE schemaname = 'prme' AND indexname = 'nodes_search_idx'),
    'CREATE INDEX nodes_search_idx ON prme.nodes USING gin (search) WITH (gin_pending_list_limit=''256'')',
    'one GIN index over search, at most 256 kB of its words pending (every recall reads them through)');
SELECT is(
    (SELECT tsvector_to_array(search) FROM prme.nodes WHERE id = 'dddddddd-0000-4000-8000-000000000001'),
    ARRAY[left(encode(sha256('decay'::bytea), 'hex'), 16) || '/p'],
    '... whose every key starts with the owner''s key: 16 hex digits of sha256(user_id), a slash, the lexeme');
SELECT is(
    (SELECT atthasdef FROM pg_attribute WHERE attrelid = 'prme.nodes'::regclass AND attname = 'search'),
    false, '... with no default either: add_node computes it');
SELECT is(
    (SELECT search FROM prme.nodes WHERE id = 'dddddddd-0000-4000-8000-000000000001'),
    array_to_tsvector(prme._owner_lexemes('decay', 'p')), 'search holds the owner lexemes of user_id and content');
SELECT is(
    prme._owner_lexemes('alice', 'The editor prefers tab-separated files!'),
    (SELECT array_agg(left(encode(sha256('alice'::bytea), 'hex'), 16) || '/' || u.l ORDER BY u.o)
     FROM unnest(ARRAY['editor', 'file', 'prefer', 'separated', 'tab']) WITH ORDINALITY AS u (l, o)),
    'owner lexemes: recall words (stop words dropped, plural endings removed), sorted, each behind the owner''s key');
SELECT ok(
    NOT (array_to_tsvector(prme._owner_lexemes('alice', 'editor tabs'))
         @@ prme._any_lexeme_query(prme._owner_lexemes('bob', 'editor tabs'))),
    'the same words of two owners are different keys');
SELECT ok(
    (SELECT bool_and(strpos(j.record, '"search"') = 0) FROM prme.journal AS j WHERE j.user_id = 'decay'),
    'journal states do not carry the derived search column');
SELECT is(
    (SELECT count(*) FROM prme.add_node('searcher', 'Added through the API: named columns, search generated') AS v
     WHERE v.content LIKE 'Added%'),
    1::bigint, 'add_node still inserts (it names its columns)');
SELECT is(
    (SELECT search FROM prme.nodes WHERE user_id = 'searcher'),
    array_to_tsvector(prme._owner_lexemes('searcher', 'Added through the API: named columns, search generated')),
    '... and computes its search vector');

-- -----------------------------------------------------------------------------
-- 3. The corpus
-- -----------------------------------------------------------------------------
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000001', 'Prefers tabs over spaces in the code editor', 'medium', 0.8, 0.2, 0.9);
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000002', 'Uses vim as the main editor', 'slow', 0.5, 0, 0.5);
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000003', 'Lives in Berlin with two cats', 'permanent', 0.5, 0, 0.5);
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000004', 'Editor theme is solarized dark', 'rapid', 0.9, 0, 0.9);
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000005', 'Tabs are rendered four spaces wide in the editor', 'medium', 0.5, 0, 0.5, 'archived');
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000006', 'Editor font is Fira Code', 'medium', 0.5, 0, 0.5, 'deprecated');
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000007', 'Old editor was emacs', 'medium', 0.5, 0, 0.5, 'superseded');
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000008', 'Editor keybindings follow vim', 'medium', 0.5, 0, 0.5, 'active', 'work');
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-000000000009', 'Likes the editor to autosave', 'medium', 0.5, 0, 0.5);
SELECT pg_temp.seed('alice', 'aaaaaaaa-0000-4000-8000-00000000000a', 'Likes the editor to autosave', 'medium', 0.5, 0, 0.5, 'contested');
SELECT pg_temp.seed('bob', 'bbbbbbbb-0000-4000-8000-000000000001', 'Prefers tabs in the editor, always tabs', 'permanent', 1, 0.5, 1);
CREATE TEMP TABLE mark AS SELECT pg_temp.nodes_fingerprint() AS fp;

-- -----------------------------------------------------------------------------
-- 4. Ranking on the corpus, frozen at T0 + 10 days
-- -----------------------------------------------------------------------------
SELECT results_eq(
    $$SELECT rank, right(id::text, 2), round(score::numeric, 9), relevance, round(effective_salience::numeric, 9),
             round(effective_confidence::numeric, 9)
      FROM prme.recall('alice', 'editor tabs', as_of => '2025-01-11 00:00:00+00')$$,
    $$VALUES (1, '01', 0.885728542, 1::double precision, 0.728560491, 0.814353676),
             (2, '02', 0.027501208, 0.03712278744726984::double precision, 0.475614712, 0.487654956),
             (3, '07', 0.026559351, 0.03712278744726984::double precision, 0.409365377, 0.452418709),
             (4, '08', 0.026559351, 0.03712278744726984::double precision, 0.409365377, 0.452418709),
             (5, '09', 0.026559351, 0.03712278744726984::double precision, 0.409365377, 0.452418709),
             (6, '0a', 0.026559351, 0.03712278744726984::double precision, 0.409365377, 0.452418709),
             (7, '04', 0.022764559, 0.03712278744726984::double precision, 0.121801755, 0.331091497)$$,
    'recall ranks by relevance * (0.5 + 0.25 salience + 0.25 confidence), equal scores by id; relevance weighs '
    'each word by its idf among the 7 candidates: editor (in all 7) ln(1 + 0.5/7.5), tabs (in 1) ln(1 + 6.5/1.5)');
SELECT is(
    (SELECT array_agg(right(id::text, 2) ORDER BY rank) FROM prme.recall('alice', 'editor tabs', as_of => '2025-01-11 00:00:00+00')),
    (SELECT array_agg(right(id::text, 2) ORDER BY rank) FROM prme.recall('alice', 'editor tabs', as_of => '2025-01-11 00:00:00+00')),
    'the same call gives the same order');
SELECT is_empty(
    $$SELECT * FROM prme.recall('alice', 'editor tabs', max_count => 1000, as_of => '2025-01-11 00:00:00+00')
      WHERE lifecycle_state IN ('archived', 'deprecated')$$,
    'archived and deprecated memories never appear (superseded and contested do)');
SELECT is_empty(
    $$SELECT * FROM prme.recall('alice', 'prefers tabs editor always', max_count => 1000) WHERE id::text LIKE 'bbbbbbbb%'$$,
    'bob''s matching memory never appears in alice''s recall');
SELECT results_eq(
    $$SELECT right(id::text, 2) FROM prme.recall('bob', 'editor tabs')$$,
    $$VALUES ('01')$$,
    '... and alice''s never in bob''s');
SELECT results_eq(
    $$SELECT rank, right(id::text, 2), relevance FROM prme.recall('alice', 'Which editor do I use?', max_count => 2,
                                                                   as_of => '2025-01-11 00:00:00+00')$$,
    $$VALUES (1, '02', 1::double precision), (2, '01', 0.03712278744726984::double precision)$$,
    'stop words are dropped and plural endings removed (use/uses): relevance weighs the query''s words (editor is '
    'in every candidate, use in one)');
SELECT results_eq(
    $$SELECT rank, right(id::text, 2) FROM prme.recall('alice', 'editor tabs', as_of => '2025-01-01 00:00:00+00')$$,
    $$VALUES (1, '01'), (2, '04'), (3, '02'), (4, '07'), (5, '08'), (6, '09'), (7, '0a')$$,
    'as_of T0: the rapid memory (04) has not faded yet and ranks second');
SELECT results_eq(
    $$SELECT rank, right(id::text, 2), round(score::numeric, 9), relevance
      FROM prme.recall('alice', NULL, as_of => '2025-01-11 00:00:00+00')$$,
    $$VALUES (1, '01', 0.885728542, 1::double precision), (2, '03', 0.750000000, 1::double precision),
             (3, '02', 0.740817417, 1::double precision), (4, '07', 0.715446021, 1::double precision),
             (5, '08', 0.715446021, 1::double precision), (6, '09', 0.715446021, 1::double precision),
             (7, '0a', 0.715446021, 1::double precision), (8, '04', 0.613223313, 1::double precision)$$,
    'no query: every recallable memory, ranked by strength alone');
SELECT results_eq(
    $$SELECT right(id::text, 2) FROM prme.recall('alice', E' \t\n ', max_count => 2, as_of => '2025-01-11 00:00:00+00')$$,
    $$VALUES ('01'), ('03')$$,
    'a blank query is no query');
SELECT is_empty($$SELECT * FROM prme.recall('alice', 'the of and it is')$$,
                'a query of stop words only matches nothing');
SELECT is_empty($$SELECT * FROM prme.recall('alice', 'zanzibar')$$, 'a query matching nothing returns nothing');
SELECT results_eq(
    $$SELECT right(id::text, 2) FROM prme.recall('alice', 'editor vim', ARRAY['work'])$$,
    $$VALUES ('08')$$,
    'scopes filters');
SELECT results_eq(
    $$SELECT right(id::text, 2) FROM prme.recall('alice', 'vim', ARRAY['work', 'personal', 'work'],
                                                 as_of => '2025-01-11 00:00:00+00')$$,
    $$VALUES ('02'), ('08')$$,
    '... several scopes, duplicates allowed');
SELECT results_eq(
    $$SELECT right(id::text, 2) FROM prme.recall('alice', 'editor tabs', max_count => 3, as_of => '2025-01-11 00:00:00+00')$$,
    $$VALUES ('01'), ('02'), ('07')$$,
    'max_count keeps the best');
SELECT results_eq(
    $$SELECT right(id::text, 2) FROM prme.recall(as_of => '2025-01-11 00:00:00+00', max_count => 1, scopes => NULL,
                                                 query => 'cats', user_id => 'alice')$$,
    $$VALUES ('03')$$,
    'named notation, in any order');
SELECT results_eq(
    $$SELECT right(id::text, 2) FROM prme.recall('alice', 'tab-separated editor''s "tabs" (tabs!) & | ! :* \\ ''', max_count => 1)$$,
    $$VALUES ('01')$$,
    'punctuation and tsquery syntax in a query are just text');
SELECT is(pg_temp.nodes_fingerprint(), (SELECT fp FROM mark), 'recall and effective_nodes write nothing');

-- A confirmation raises salience (boost) and restarts the clock.
SELECT is(
    (SELECT rank FROM prme.recall('alice', 'editor', max_count => 10, as_of => now() + interval '1 day')
     WHERE id = 'aaaaaaaa-0000-4000-8000-000000000004'),
    7, 'long after T0 and before its confirmation, the rapid memory ranks last');
SELECT lives_ok($$SELECT prme.reinforce('aaaaaaaa-0000-4000-8000-000000000004', 'alice')$$, 'confirm it');
SELECT results_eq(
    $$SELECT rank, round(effective_salience::numeric, 9) FROM prme.recall('alice', 'editor', as_of => now() + interval '1 day')
      WHERE id = 'aaaaaaaa-0000-4000-8000-000000000004'$$,
    $$VALUES (1, round((0.9 * exp(-0.2) + 0.15 * exp(-0.1))::numeric, 9))$$,
    '... after it, t counts from the confirmation and the boost adds: it ranks first');
SELECT lives_ok($$SELECT prme.archive_node('alice', 'aaaaaaaa-0000-4000-8000-000000000004')$$, 'archive it');
SELECT is_empty(
    $$SELECT * FROM prme.recall('alice', 'editor', max_count => 1000) WHERE id = 'aaaaaaaa-0000-4000-8000-000000000004'$$,
    '... and it is gone from recall');

-- -----------------------------------------------------------------------------
-- 5. Bad arguments
-- -----------------------------------------------------------------------------
SELECT throws_ok($$SELECT * FROM prme.recall(NULL, 'x')$$, 'PR422', 'user_id must not be null', 'NULL user_id: PR422');
SELECT throws_ok($$SELECT * FROM prme.recall('alice', 'x', max_count => 0)$$, 'PR422',
                 'max_count must be between 1 and 1000', 'max_count 0: PR422');
SELECT throws_ok($$SELECT * FROM prme.recall('alice', 'x', max_count => 1001)$$, 'PR422', NULL, 'max_count 1001: PR422');
SELECT throws_ok($$SELECT * FROM prme.recall('alice', 'x', max_count => NULL)$$, 'PR422', NULL, 'max_count NULL: PR422');
SELECT throws_ok($$SELECT * FROM prme.recall('alice', 'x', '{}')$$, 'PR422',
                 'scopes must be a one-dimensional array of 1 to 100 scopes', 'empty scopes: PR422');
SELECT throws_ok($$SELECT * FROM prme.recall('alice', 'x', ARRAY['personal', NULL])$$, 'PR422',
                 'scope must match ^[a-z][a-z0-9_-]{0,62}$', 'a NULL scope: PR422');
SELECT throws_ok($$SELECT * FROM prme.recall('alice', 'x', ARRAY['Personal''; DROP TABLE prme.nodes; --'])$$,
                 'PR422', NULL, 'a malformed scope: PR422');
SELECT throws_ok($$SELECT * FROM prme.recall('alice', 'x', '{{a,b},{c,d}}')$$, 'PR422', NULL,
                 'a two-dimensional scopes array: PR422');
SELECT throws_ok($$SELECT * FROM prme.recall('alice', repeat('x', 65537))$$, 'PR422',
                 'query must be at most 65536 bytes', 'a query over 64 KiB: PR422');
SELECT throws_ok($$SELECT * FROM prme.recall('alice', 'x', as_of => '-infinity')$$, 'PR422', NULL,
                 'as_of -infinity: PR422');

-- -----------------------------------------------------------------------------
-- 6. The journal still verifies and every node replays
-- -----------------------------------------------------------------------------
SELECT is_empty($$SELECT * FROM prme.verify_journal('alice')$$, 'alice''s journal verifies');
SELECT is_empty(
    $$SELECT n.user_id, n.id, r.problem FROM prme.nodes AS n, LATERAL prme.replay_node(n.user_id, n.id) AS r
      WHERE n.user_id IN ('alice', 'bob', 'decay') AND NOT r.matches$$,
    'every node replays from its journal (the search column is not part of the state)');

SELECT * FROM finish();
ROLLBACK;

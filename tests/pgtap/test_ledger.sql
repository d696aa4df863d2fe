-- =============================================================================
-- test_ledger.sql: the operations ledger in one transaction.
--
-- Proves: the catalog (tables keyed by owner, API functions granted to prme_app,
-- helpers not); RFC 8785 canonical text and uuid v5 for known inputs; receipt
-- rules (new, same, conflicting, invalid submits; ids scoped by owner); events
-- numbered per operation, and hidden from readers while their transaction runs;
-- the executor applying each kind once through the API functions (record_outcome
-- and link_correction included), blocking, releasing and rejecting by dependency,
-- rejecting invalid payloads with a reason; a long memory planned into parts and
-- committed as one memory. A submit writes one row: the accepted event is kept in
-- the operation row (accepted_seq).
-- Concurrency, killed executors and streams across transactions are in
-- tests/test_ledger.py.
--
-- Fixed operation ids: 0e000000-0000-4000-8000-0000000000NN.
-- =============================================================================
BEGIN;
SELECT plan(88);

CREATE FUNCTION pg_temp.op(n integer) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT '0e000000-0000-4000-8000-' || lpad(n::text, 12, '0')
$$;

-- Submits with the hash computed by the database's own canonical form.
CREATE FUNCTION pg_temp.submit(
    p_user text, p_n integer, p_kind text, p_payload jsonb, p_deps integer[] DEFAULT '{}'
) RETURNS prme.operation_receipt LANGUAGE sql AS $$
    SELECT prme.submit_operation(
        p_user, pg_temp.op(p_n), 2, p_kind,
        ARRAY(SELECT pg_temp.op(d) FROM unnest(p_deps) AS d), prme.payload_hash(p_payload), p_payload
    )
$$;

CREATE FUNCTION pg_temp.state(p_n integer, p_user text DEFAULT 'alice') RETURNS text LANGUAGE sql AS $$
    SELECT (prme.get_receipt(p_user, pg_temp.op(p_n))).state
$$;

CREATE FUNCTION pg_temp.reason(p_n integer) RETURNS text LANGUAGE sql AS $$
    SELECT (prme.get_receipt('alice', pg_temp.op(p_n))).error ->> 'reason'
$$;

-- The states of an operation's events, read from the tables (operation_events
-- hides events of running transactions, this one included): the accepted event
-- in the operation row, the later ones in prme.operation_events.
CREATE FUNCTION pg_temp.history(p_n integer) RETURNS text[] LANGUAGE sql AS $$
    SELECT array_agg(e.state ORDER BY e.operation_seq)
    FROM (
        SELECT e.state, e.operation_seq FROM prme.operation_events AS e
        WHERE e.user_id = 'alice' AND e.operation_id = pg_temp.op(p_n)
        UNION ALL
        SELECT 'accepted', 1 FROM prme.operations AS o
        WHERE o.user_id = 'alice' AND o.operation_id = pg_temp.op(p_n) AND o.accepted_seq IS NOT NULL
    ) AS e
$$;

-- -----------------------------------------------------------------------------
-- 1. Catalog and privileges
-- -----------------------------------------------------------------------------
SELECT has_table('prme', 'operations', 'prme.operations exists');
SELECT has_table('prme', 'operation_events', 'prme.operation_events exists');
SELECT has_table('prme', 'operation_parts', 'prme.operation_parts exists');
SELECT col_is_pk('prme', 'operations', ARRAY['user_id', 'operation_id'], 'operations: key leads with user_id');
SELECT col_is_pk('prme', 'operation_events', ARRAY['user_id', 'seq'], 'operation_events: key leads with user_id');
SELECT col_is_pk(
    'prme', 'operation_parts', ARRAY['user_id', 'operation_id', 'part_no'], 'operation_parts: key leads with user_id'
);
SELECT function_privs_are(
    'prme', 'submit_operation', ARRAY['text', 'text', 'integer', 'text', 'text[]', 'text', 'jsonb'],
    'prme_app', ARRAY['EXECUTE'], 'prme_app may submit operations'
);
SELECT function_privs_are('prme', 'get_receipt', ARRAY['text', 'text'], 'prme_app', ARRAY['EXECUTE'],
    'prme_app may read receipts');
SELECT function_privs_are('prme', 'operation_events', ARRAY['text', 'bigint', 'text', 'integer'], 'prme_app',
    ARRAY['EXECUTE'], 'prme_app may read events');
SELECT function_privs_are('prme', 'run_operations', ARRAY['integer', 'text', 'integer'], 'prme_app',
    ARRAY['EXECUTE'], 'prme_app may run the executor');
SELECT function_privs_are('prme', '_jcs', ARRAY['jsonb'], 'prme_app', ARRAY[]::text[],
    'helpers are not granted');
SELECT function_privs_are('prme', '_execute_operation', ARRAY['text', 'text', 'text', 'integer'], 'prme_app',
    ARRAY[]::text[], 'the executor''s internals are not granted');
SELECT is_definer('prme', 'submit_operation', ARRAY['text', 'text', 'integer', 'text', 'text[]', 'text', 'jsonb'],
    'submit_operation is SECURITY DEFINER');
SELECT is_definer('prme', 'run_operations', ARRAY['integer', 'text', 'integer'], 'run_operations is SECURITY DEFINER');

-- -----------------------------------------------------------------------------
-- 2. Canonical JSON and derived ids
-- -----------------------------------------------------------------------------
SELECT is(
    prme.canonical_json('{"b": [1.0, 1e-7, 1e21, 0.000001, 1E2], "a": {"y": null, "x": "\u0001"}}'),
    '{"a":{"x":"\u0001","y":null},"b":[1,1e-7,1e+21,0.000001,100]}',
    'canonical JSON: sorted keys, no whitespace, ECMAScript numbers, minimal escapes'
);
SELECT is(
    prme.canonical_json(jsonb_build_object(U&'\20AC', 1, U&'\FB33', 2, U&'\+01F600', 3, '1', 4, E'\r', 5)),
    '{"\r":5,"1":4,"' || U&'\20AC' || '":1,"' || U&'\+01F600' || '":3,"' || U&'\FB33' || '":2}',
    'keys in UTF-16 code-unit order (RFC 8785 3.2.3): U+1F600 sorts before U+FB33'
);
SELECT throws_ok(
    $$SELECT prme.canonical_json('9007199254740993')$$, 'PR422', 'a JSON number has no exact IEEE 754 double form',
    'a number whose nearest double is another number is PR422 (one hash, one payload)'
);
SELECT throws_ok($$SELECT prme.canonical_json('[1e400]')$$, 'PR422', NULL, 'a number beyond double range is PR422');
SELECT is(
    prme.payload_hash('{"content": "x"}'), encode(sha256(convert_to('{"content":"x"}', 'UTF8')), 'hex'),
    'payload_hash is the sha256 of the canonical text'
);
SELECT is(
    prme.derived_id('00000000-0000-0000-0000-000000000001'), 'b0077995-cb15-580b-ad40-0fd1cc64d8c8'::uuid,
    'derived_id is uuid5(uuid5(NAMESPACE_URL, ''urn:prme-pg:operations''), operation id), as Python computes it'
);
SELECT is(
    prme._uuid_v5('6ba7b810-9dad-11d1-80b4-00c04fd430c8', 'python.org'), '886313e1-3b8a-5372-9b90-0c9aee199e5d'::uuid,
    'uuid v5 of a known name (RFC 4122 DNS namespace)'
);

-- -----------------------------------------------------------------------------
-- 3. Receipts
-- -----------------------------------------------------------------------------
CREATE TEMP TABLE first_receipt AS SELECT * FROM pg_temp.submit('alice', 1, 'add_node', '{"content": "prefers tea"}');
SELECT is((SELECT created FROM first_receipt), TRUE, 'a new operation is created');
SELECT is((SELECT state FROM first_receipt), 'accepted', 'and accepted');
SELECT is((SELECT attempts FROM first_receipt), 0, 'with no attempt yet');
SELECT is(
    (SELECT created FROM pg_temp.submit('alice', 1, 'add_node', '{"content": "prefers tea"}')), FALSE,
    'the same id and payload returns the stored receipt'
);
SELECT is(
    (SELECT created FROM pg_temp.submit('alice', 1, 'add_node', '{"content":"prefers tea"}')), FALSE,
    'whitespace and key order do not change the hash'
);
SELECT throws_ok(
    $$SELECT pg_temp.submit('alice', 1, 'add_node', '{"content": "prefers coffee"}')$$, 'PR409', NULL,
    'the same id with another payload is PR409'
);
SELECT throws_ok(
    $$SELECT pg_temp.submit('alice', 1, 'add_event', '{"content": "prefers tea"}')$$, 'PR409', NULL,
    'the same id with another kind is PR409'
);
SELECT is(
    (SELECT payload ->> 'content' FROM prme.operations WHERE operation_id = pg_temp.op(1)), 'prefers tea',
    'the original is untouched'
);
SELECT throws_ok(
    $$SELECT prme.submit_operation('alice', pg_temp.op(2), 2, 'add_node', '{}', repeat('0', 63), '{"content": "x"}')$$,
    'PR422', 'payload_hash must be 64 lowercase hex digits',
    'a malformed hash is PR422 (a well-formed wrong one is the executor''s to reject: tests/test_ledger.py)'
);
SELECT throws_ok(
    $$SELECT prme.submit_operation('alice', pg_temp.op(2), 1, 'add_node', '{}',
        prme.payload_hash('{"content": "x"}'), '{"content": "x"}')$$,
    'PR422', 'schema_version must be 2', 'schema_version 1 is PR422'
);
SELECT throws_ok(
    $$SELECT pg_temp.submit('alice', 2, 'drop_table', '{"content": "x"}')$$, 'PR422', NULL, 'an unknown kind is PR422'
);
SELECT is(
    (SELECT dependencies FROM pg_temp.submit('alice', 90, 'add_node', '{"content": "x"}', ARRAY[99, 1, 99])),
    ARRAY[pg_temp.op(99), pg_temp.op(1)],
    'a dependency not submitted yet is accepted (waited for); dependencies in the order given, each once'
);
SELECT is(
    (SELECT state FROM pg_temp.submit('carol', 91, 'add_node', '{"content": "x"}', ARRAY[1])), 'accepted',
    'another owner''s operation as a dependency is one this owner has not submitted: accepted, waited for'
);
DELETE FROM prme.operations WHERE operation_id IN (pg_temp.op(90), pg_temp.op(91));
SELECT throws_ok(
    $$SELECT pg_temp.submit('alice', 2, 'add_node', '{"content": "x"}', ARRAY[2])$$, 'PR404', NULL,
    'depending on itself is PR404'
);
SELECT throws_ok(
    $$SELECT prme.get_receipt('alice', pg_temp.op(2))$$, 'PR404', 'operation not found',
    'an unknown operation is PR404'
);
SELECT throws_ok(
    $$SELECT prme.get_receipt('bob', pg_temp.op(1))$$, 'PR404', 'operation not found',
    'another owner''s operation is PR404'
);
SELECT is(
    (SELECT created FROM pg_temp.submit('bob', 1, 'add_node', '{"content": "bob''s own"}')), TRUE,
    'the same id is independent for another owner'
);
SELECT is(pg_temp.history(1), ARRAY['accepted'], 'acceptance has one event');
SELECT is(
    (SELECT count(*)::integer FROM prme.operation_events WHERE operation_id = pg_temp.op(1)), 0,
    'kept in the operation row: a submit writes one row'
);
SELECT ok(
    (SELECT accepted_seq >> 20 = pg_current_xact_id()::text::bigint FROM prme.operations
     WHERE user_id = 'alice' AND operation_id = pg_temp.op(1)),
    'its position is (transaction id << 20) + n'
);
SELECT is_empty(
    $$SELECT * FROM prme.operation_events('alice')$$,
    'events of a transaction that is still running are not shown, not even to itself'
);
SELECT throws_ok(
    $$SELECT * FROM prme.operation_events('alice', 0, pg_temp.op(77))$$, 'PR404', NULL,
    'events of an unknown operation are PR404'
);

-- -----------------------------------------------------------------------------
-- 4. The executor
-- -----------------------------------------------------------------------------
DO $$
BEGIN
    PERFORM pg_temp.submit('alice', 3, 'add_event', '{"content": "said so"}');
END;
$$;
DO $$
BEGIN
    PERFORM pg_temp.submit(
        'alice', 4, 'reinforce',
        jsonb_build_object('node_id', prme.derived_id(pg_temp.op(1)), 'evidence_id', prme.derived_id(pg_temp.op(3))),
        ARRAY[1, 3]
    );
END;
$$;
DO $$
BEGIN
    PERFORM pg_temp.submit('alice', 5, 'add_node', '{"content": "x", "colour": "red"}');
END;
$$;
DO $$
BEGIN
    PERFORM pg_temp.submit('alice', 6, 'archive_node', jsonb_build_object('node_id', prme.derived_id(pg_temp.op(1))), ARRAY[5]);
END;
$$;
DO $$
BEGIN
    PERFORM pg_temp.submit('alice', 7, 'reinforce', jsonb_build_object('node_id', gen_random_uuid()));
END;
$$;

CREATE TEMP TABLE batch AS SELECT * FROM prme.run_operations(100, 'pgtap');
SELECT is((SELECT count(*)::integer FROM batch), 7, 'one call claims every ready operation of every owner');
SELECT is(pg_temp.state(1), 'committed', 'add_node committed');
SELECT ok(
    EXISTS (SELECT FROM prme.nodes WHERE user_id = 'alice' AND id = prme.derived_id(pg_temp.op(1))),
    'the memory has the id derived from the operation id'
);
SELECT is(pg_temp.state(3), 'committed', 'add_event committed');
SELECT ok(
    EXISTS (SELECT FROM prme.events WHERE user_id = 'alice' AND id = prme.derived_id(pg_temp.op(3))),
    'the event has the id derived from the operation id'
);
SELECT is(pg_temp.state(4), 'committed', 'reinforce committed after its dependencies');
SELECT is(
    (SELECT (result ->> 'node_version')::integer FROM prme.operations WHERE operation_id = pg_temp.op(4)), 2,
    'the receipt carries the result'
);
SELECT ok(
    EXISTS (SELECT FROM prme.journal WHERE user_id = 'alice' AND request_id = pg_temp.op(4)::uuid AND op = 'reinforce'),
    'reinforce used the operation id as its request_id (its journal record carries it)'
);
SELECT is(pg_temp.state(5), 'rejected', 'an unknown payload field is rejected');
SELECT is(pg_temp.reason(5), 'invalid_payload', 'with reason invalid_payload');
SELECT is(pg_temp.state(6), 'rejected', 'what depends on a rejected operation is rejected');
SELECT is(pg_temp.reason(6), 'dependency_rejected', 'with reason dependency_rejected');
SELECT is(pg_temp.reason(7), 'not_found', 'reinforcing an unknown memory is rejected as not_found');
SELECT is(pg_temp.state(1, 'bob'), 'committed', 'bob''s operation ran in the same batch');
SELECT is(
    pg_temp.history(4), ARRAY['accepted', 'processing', 'committed'],
    'events of a committed operation: accepted, processing, committed'
);
SELECT is(pg_temp.history(6), ARRAY['accepted', 'rejected'], 'a rejected dependent: accepted, rejected');
SELECT is_empty($$SELECT * FROM prme.run_operations(100, 'pgtap')$$, 'a second call finds nothing to do');
SELECT is(
    (SELECT count(*)::integer FROM prme.journal WHERE user_id = 'alice'), 2,
    'each operation took effect once (create and reinforce journaled)'
);
SELECT is_empty($$SELECT * FROM prme.verify_journal('alice')$$, 'the journal verifies');

-- A blocked chain: 10 is a long memory that needs three calls at one part each.
DO $$
BEGIN
    PERFORM pg_temp.submit('alice', 10, 'add_node', jsonb_build_object(
        'content', (SELECT string_agg('w' || i, ' ') FROM generate_series(1, 30) AS i), 'token_budget', 10));
END;
$$;
DO $$
BEGIN
    PERFORM pg_temp.submit('alice', 11, 'reinforce', jsonb_build_object('node_id', prme.derived_id(pg_temp.op(10))), ARRAY[10]);
END;
$$;
DO $$
BEGIN
    PERFORM pg_temp.submit('alice', 12, 'add_node', '{"content": "after both"}', ARRAY[11, 10]);
END;
$$;
SELECT results_eq(
    $$SELECT operation_id, outcome FROM prme.run_operations(100, 'pgtap', 1) ORDER BY operation_id$$,
    $$VALUES (pg_temp.op(10), 'progress'), (pg_temp.op(11), 'blocked'), (pg_temp.op(12), 'blocked')$$,
    'a long memory progresses, what waits for it is blocked'
);
SELECT is(
    (prme.get_receipt('alice', pg_temp.op(12))).blocked_by, ARRAY[pg_temp.op(10), pg_temp.op(11)],
    'blocked_by lists the open dependencies, sorted'
);
SELECT results_eq(
    $$SELECT part_no, token_start, token_end, state FROM prme.operation_parts('alice', pg_temp.op(10))$$,
    $$VALUES (1, 0, 10, 'validated'), (2, 10, 20, 'planned'), (3, 20, 30, 'planned')$$,
    'the plan: three parts of ten tokens, one validated'
);
SELECT is(pg_temp.state(10), 'processing', 'the long memory is processing');
SELECT ok(
    NOT EXISTS (SELECT FROM prme.nodes WHERE id = prme.derived_id(pg_temp.op(10))),
    'no memory exists before every part is validated'
);
SELECT lives_ok($$SELECT * FROM prme.run_operations(100, 'pgtap', 1)$$, 'second part');
SELECT results_eq(
    $$SELECT operation_id, outcome FROM prme.run_operations(100, 'pgtap', 1) ORDER BY operation_id$$,
    $$VALUES (pg_temp.op(10), 'committed')$$,
    'the third part completes the memory'
);
SELECT is(
    (SELECT content FROM prme.nodes WHERE id = prme.derived_id(pg_temp.op(10))),
    (SELECT string_agg('w' || i, ' ') FROM generate_series(1, 30) AS i),
    'one memory, assembled from its parts'
);
SELECT is(pg_temp.state(11), 'accepted', 'its commit released the dependent');
SELECT is(
    (prme.get_receipt('alice', pg_temp.op(12))).blocked_by, ARRAY[pg_temp.op(11)],
    'a dependent with another open dependency stays blocked, blocked_by shrinks'
);
SELECT lives_ok($$SELECT * FROM prme.run_operations(100, 'pgtap')$$, 'run again');
SELECT is(pg_temp.state(11), 'committed', 'the released operation committed');
SELECT is(pg_temp.state(12), 'accepted', 'and released the last one');
SELECT lives_ok($$SELECT * FROM prme.run_operations(100, 'pgtap')$$, 'run again');
SELECT is(pg_temp.history(12), ARRAY['accepted', 'blocked', 'accepted', 'processing', 'committed'],
    'the full life of a blocked operation');

-- record_outcome and link_correction: applied through their API functions, once.
-- The memory of operation 1 ("prefers tea") is active.
DO $$
BEGIN
    PERFORM pg_temp.submit('alice', 20, 'record_outcome', jsonb_build_object(
        'node_id', prme.derived_id(pg_temp.op(1)), 'outcome', 'implicit_success', 'thread_id', 't-1',
        'evidence_id', prme.derived_id(pg_temp.op(3)), 'profile_id', 'p-1', 'notes', 'used it'));
    PERFORM pg_temp.submit('alice', 21, 'record_outcome', jsonb_build_object(
        'node_id', gen_random_uuid(), 'outcome', 'implicit_success'));
    PERFORM pg_temp.submit('alice', 22, 'record_outcome', jsonb_build_object(
        'node_id', prme.derived_id(pg_temp.op(1)), 'outcome', 'liked_it'));
    PERFORM pg_temp.submit('alice', 23, 'link_correction', jsonb_build_object(
        'message', 'no, it prefers coffee not tea', 'candidate_node_ids',
        jsonb_build_array(prme.derived_id(pg_temp.op(1)), prme.derived_id(pg_temp.op(10))), 'thread_id', 't-1'));
    PERFORM pg_temp.submit('alice', 24, 'link_correction', jsonb_build_object(
        'message', 'actually, something unrelated entirely', 'candidate_node_ids', '[]'::jsonb));
    PERFORM pg_temp.submit('alice', 25, 'link_correction', jsonb_build_object(
        'message', 'no', 'candidate_node_ids', 'not-a-list'));
END;
$$;
SELECT results_eq(
    $$SELECT operation_id, outcome FROM prme.run_operations(100, 'pgtap') ORDER BY operation_id$$,
    $$VALUES (pg_temp.op(20), 'committed'), (pg_temp.op(21), 'rejected'), (pg_temp.op(22), 'rejected'),
        (pg_temp.op(23), 'committed'), (pg_temp.op(24), 'committed'), (pg_temp.op(25), 'rejected')$$,
    'record_outcome and link_correction run; invalid ones are rejected'
);
SELECT results_eq(
    $$SELECT outcome, evidence_id, profile_id, thread_id, notes, request_id, recorded_by FROM prme.outcomes
      WHERE user_id = 'alice' AND recorded_by = 'record_outcome'$$,
    $$VALUES ('implicit_success', prme.derived_id(pg_temp.op(3)), 'p-1', 't-1', 'used it', pg_temp.op(20)::uuid,
        'record_outcome')$$,
    'record_outcome appended one outcome with every payload field, keyed by the operation id'
);
SELECT is(
    (prme.get_receipt('alice', pg_temp.op(20))).result,
    jsonb_build_object(
        'outcome_id', (SELECT id FROM prme.outcomes WHERE request_id = pg_temp.op(20)::uuid),
        'node_id', prme.derived_id(pg_temp.op(1)), 'node_version', 2, 'replayed', FALSE),
    'the receipt of record_outcome names the outcome'
);
SELECT is(pg_temp.reason(21), 'not_found', 'an outcome for an unknown memory is rejected as not_found');
SELECT is(pg_temp.reason(22), 'invalid_payload', 'an unknown outcome is rejected as invalid_payload');
SELECT is(pg_temp.reason(25), 'invalid_payload', 'candidate_node_ids that is not an array is invalid_payload');
SELECT is(
    (prme.get_receipt('alice', pg_temp.op(23))).result - 'matches',
    jsonb_build_object(
        'status', 'linked', 'node_id', prme.derived_id(pg_temp.op(1)),
        'outcome_id', (SELECT id FROM prme.outcomes WHERE recorded_by = 'link_correction'), 'inbox_id', NULL),
    'a matching correction is linked to its memory; the receipt names the outcome'
);
SELECT is(
    (prme.get_receipt('alice', pg_temp.op(24))).result - 'inbox_id',
    '{"status": "unmatched", "node_id": null, "outcome_id": null, "matches": []}'::jsonb,
    'a correction that matches nothing is unmatched'
);
SELECT is(
    (SELECT id FROM prme.correction_inbox WHERE user_id = 'alice'),
    ((prme.get_receipt('alice', pg_temp.op(24))).result ->> 'inbox_id')::uuid,
    'and its receipt names the inbox entry'
);
SELECT is_empty($$SELECT * FROM prme.run_operations(100, 'pgtap')$$, 'nothing is applied twice');
SELECT is(
    (SELECT count(*)::integer FROM prme.outcomes WHERE user_id = 'alice' AND recorded_by <> 'reinforce'), 2,
    'one outcome each from record_outcome and link_correction'
);

SELECT * FROM finish();
ROLLBACK;

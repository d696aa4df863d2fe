-- prme-pg migration 0017_reference_protocol: the ledger speaks the reference protocol (issue 21).
--   * Operation ids are text: 1 to 128 characters of A-Z a-z 0-9 . _ : - (prme._operation_id); a
--     UUID stays valid and is stored in lowercase, as before. Existing ids, dependencies, blocked_by
--     and event ids are converted in place (uuid::text is the lowercase form they were echoed in),
--     so their receipts, events and the ids derived from them (prme.derived_id, the request_id of
--     reinforce and record_outcome) are unchanged.
--   * Operation kinds are written once (prme._operation_kinds()), and add_memory is one of them.
--   * Dependencies are kept in the order given; one not submitted yet is waited for (blocked), at
--     most prme.dependency_wait_seconds (default one day), then rejected as dependency_missing
--     (or dependency_cycle); blocked operations are therefore in the executor's queue index.
--   * Receipts carry progress_seq; _resubmitted is named for what it returns
--     (_stored_receipt_or_conflict); column comments lose their upgrade history.
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0017_reference_protocol.sql
-- (or prme-pg migrate). Locks: ACCESS EXCLUSIVE on prme.operations, prme.operation_events,
-- prme.imported_operation_events and prme.operation_parts while they are rewritten (reads and
-- submits of the ledger wait; memories are not locked). Measured here: 19 s for a million
-- committed operations with two event rows each (PostgreSQL 15, 2 shared cores, one run).
-- Its function bodies are copied from sql/postgres/400_jcs.sql, 410_operations.sql,
-- 420_submit_operation.sql, 430_operation_events.sql, 440_run_operations.sql and
-- 450_long_memories.sql.

SET LOCAL ROLE prme_owner;

-- Functions whose arguments or results change type go first; they are created again below.
DROP FUNCTION prme.submit_operation(text, uuid, integer, text, uuid[], text, jsonb);
DROP FUNCTION prme.get_receipt(text, uuid);
DROP FUNCTION prme.operation_events(text, bigint, uuid, integer);
DROP FUNCTION prme.operation_parts(text, uuid);
DROP FUNCTION prme.derived_id(uuid);
DROP FUNCTION prme._resubmitted(prme.operations, text, uuid[], text, jsonb);
DROP FUNCTION prme._execute_operation(text, uuid, text, integer);
DROP FUNCTION prme._operation_failed(text, uuid, text, text, text, text);
DROP FUNCTION prme.run_operations(integer, text, integer);

-- Ids as text, compared byte by byte (COLLATE "C"): uuid::text is the lowercase 8-4-4-4-12
-- form, the one receipts showed, and sorts as the uuids did.
ALTER TABLE prme.operation_parts DROP CONSTRAINT operation_parts_user_id_operation_id_fkey;
ALTER TABLE prme.operations
DROP CONSTRAINT operations_dependencies_check,
ALTER COLUMN dependencies DROP DEFAULT,
ALTER COLUMN blocked_by DROP DEFAULT,
ALTER COLUMN operation_id TYPE text COLLATE "C" USING operation_id::text,
ALTER COLUMN dependencies TYPE text[] COLLATE "C" USING dependencies::text[],
ALTER COLUMN blocked_by TYPE text[] COLLATE "C" USING blocked_by::text[],
ALTER COLUMN dependencies SET DEFAULT '{}',
ALTER COLUMN blocked_by SET DEFAULT '{}',
ADD CONSTRAINT operations_dependencies_check CHECK (array_position(dependencies, NULL) IS NULL);
ALTER TABLE prme.operation_events ALTER COLUMN operation_id TYPE text COLLATE "C" USING operation_id::text;
ALTER TABLE prme.imported_operation_events
ALTER COLUMN operation_id TYPE text COLLATE "C" USING operation_id::text;
ALTER TABLE prme.operation_parts ALTER COLUMN operation_id TYPE text COLLATE "C" USING operation_id::text;
ALTER TABLE prme.operation_parts ADD CONSTRAINT operation_parts_user_id_operation_id_fkey
FOREIGN KEY (user_id, operation_id) REFERENCES prme.operations (user_id, operation_id);

-- Blocked operations come up again at the end of their dependency wait.
DROP INDEX prme.operations_ready;
CREATE INDEX operations_ready ON prme.operations (next_attempt_at)
WHERE state IN ('accepted', 'processing', 'blocked');

ALTER TYPE prme.operation_event ALTER ATTRIBUTE operation_id TYPE text;
ALTER TYPE prme.operation_receipt
ALTER ATTRIBUTE operation_id TYPE text,
ALTER ATTRIBUTE dependencies TYPE text[],
ALTER ATTRIBUTE blocked_by TYPE text[],
ADD ATTRIBUTE progress_seq integer;

COMMENT ON TYPE prme.operation_receipt IS
'The receipt of an operation: its identity, state, what blocks it, its result or error, attempts, '
'created (true only for the call that accepted it) and progress_seq (operation_seq of its newest event).';
COMMENT ON COLUMN prme.operations.dependencies IS
'The operations this one waits for, in the order the caller listed them (each once).';
COMMENT ON COLUMN prme.operations.blocked_by IS
'While blocked: the dependencies that have not committed yet (submitted or not), sorted.';
COMMENT ON COLUMN prme.operations.next_attempt_at IS
'The executor claims an accepted or processing operation from this time on (retries back off), and looks '
'again at a blocked one at this time (its dependency wait, docs/LEDGER.md).';
COMMENT ON COLUMN prme.operations.accepted_seq IS
'Stream position (seq) of the operation''s first event, accepted (operation_seq 1, detail {}), which lives in '
'this row rather than in prme.operation_events. NULL when that event is a row of prme.operation_events.';

-- Blocked operations of before wait as they did (their dependencies all exist): they come up
-- again after one dependency wait from now.
UPDATE prme.operations SET next_attempt_at = now() + interval '1 day' WHERE state = 'blocked';


-- >>> sql/postgres/400_jcs.sql

CREATE OR REPLACE FUNCTION prme.derived_id(operation_id text)
RETURNS uuid
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The id as the ledger stores it: a UUID in lowercase, so a UUID id derives the
    -- same id it did when ids were uuid (PR422 for what is no operation id).
    RETURN prme._uuid_v5('473adea8-cd69-5ad2-b4b4-e329cd93d1ff', prme._operation_id(operation_id));
END;
$$;

COMMENT ON FUNCTION prme.derived_id(text) IS
'The id of the memory (add_node, add_memory) or event (add_event) that an operation creates: '
'uuid5(uuid5(NAMESPACE_URL, ''urn:prme-pg:operations''), operation_id as stored: a UUID in lowercase), so '
'callers know it in advance.';

-- >>> sql/postgres/410_operations.sql

CREATE OR REPLACE FUNCTION prme._operation_kinds()
RETURNS text[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    -- No SET search_path (it names no object): a function with one is never inlined,
    -- and inlined this list is a constant in every caller's plan.
    SELECT ARRAY[
        'add_node', 'add_event', 'reinforce', 'archive_node', 'record_outcome', 'link_correction', 'add_memory'
    ];
$$;

COMMENT ON FUNCTION prme._operation_kinds() IS
'Internal: the operation kinds the ledger accepts and its executor applies (docs/LEDGER.md).';

CREATE OR REPLACE FUNCTION prme._operation_id(operation_id text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- 1 to 128 characters of a path-safe alphabet (docs/LEDGER.md, "Compatibility").
    -- A UUID in its 8-4-4-4-12 form is one id whatever its case: lowercase, as the
    -- ledger stored UUID ids before ids were text, so a retry finds its operation.
    IF operation_id IS NULL OR operation_id !~ '^[A-Za-z0-9._:-]{1,128}$' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'an operation id must be 1 to 128 characters of A-Z, a-z, 0-9, ".", "_", ":" and "-"',
            DETAIL = format('got %s', coalesce(quote_literal(left(operation_id, 80)), 'NULL'));
    END IF;
    IF operation_id ~ '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$' THEN
        RETURN lower(operation_id);
    END IF;
    RETURN operation_id;
END;
$$;

COMMENT ON FUNCTION prme._operation_id(text) IS
'Internal: an operation id as the ledger stores it (a UUID in lowercase, any other id as given); PR422 unless '
'it is 1 to 128 characters of A-Z a-z 0-9 . _ : -.';

CREATE OR REPLACE FUNCTION prme._operation_receipt(op prme.operations, created boolean)
RETURNS prme.operation_receipt
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN ROW(
        op.operation_id, op.kind, op.payload_hash, op.dependencies, op.state, op.blocked_by,
        op.result, op.error, op.attempts, op.created_at, op.updated_at, created, op.last_event_seq
    )::prme.operation_receipt;
END;
$$;

COMMENT ON FUNCTION prme._operation_receipt(prme.operations, boolean) IS
'Internal: the receipt of an operation row.';

-- >>> sql/postgres/420_submit_operation.sql

CREATE OR REPLACE FUNCTION prme._stored_receipt_or_conflict(
    op prme.operations,
    kind text,
    dependencies text[],
    payload_hash text,
    payload jsonb
)
RETURNS prme.operation_receipt
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_differs text[] := '{}'::text[];
BEGIN
    IF op.kind <> kind THEN
        v_differs := v_differs || 'kind'::text;
    END IF;
    -- As sets: both sides hold each id once.
    IF NOT (op.dependencies @> dependencies AND op.dependencies <@ dependencies) THEN
        v_differs := v_differs || 'dependencies'::text;
    END IF;
    IF op.payload_hash <> payload_hash THEN
        v_differs := v_differs || 'payload_hash'::text;
    END IF;
    -- jsonb equality: the same value whatever its text (member order, spacing,
    -- 1.0 or 1), compared in C without canonicalising either side.
    IF op.payload <> payload THEN
        v_differs := v_differs || 'payload'::text;
    END IF;
    IF cardinality(v_differs) > 0 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR409',
            MESSAGE = 'operation_id was already used for another operation',
            DETAIL = format('the stored operation differs in %s', array_to_string(v_differs, ', ')),
            HINT = 'choose a new operation_id for a new operation';
    END IF;
    RETURN prme._operation_receipt(op, FALSE);
END;
$$;

COMMENT ON FUNCTION prme._stored_receipt_or_conflict(prme.operations, text, text[], text, jsonb) IS
'Internal: the answer to a submit whose operation_id is taken: the stored receipt when it is the same '
'operation (kind, dependencies as a set, declared payload_hash, payload equal as JSON values), else PR409.';

CREATE OR REPLACE FUNCTION prme.submit_operation(
    user_id text,
    operation_id text,
    schema_version integer,
    kind text,
    dependencies text[],
    payload_hash text,
    payload jsonb
)
RETURNS prme.operation_receipt
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(submit_operation.user_id);
    v_id text;
    v_op prme.operations;
    v_dependencies text[] := '{}'::text[];
BEGIN
    -- Speed matters here (docs/LEDGER.md, Performance): every PL/pgSQL expression
    -- costs a plan check in each new transaction, so the common case runs as few
    -- as possible. One test passes a valid request; only an invalid one takes the
    -- checks one by one, to say what is wrong. The bounds are prme.ledger_limits()'s;
    -- the depth test is prme._json_too_deep's, written out.
    IF submit_operation.operation_id IS NULL
       OR submit_operation.operation_id !~ '^[A-Za-z0-9._:-]{1,128}$'
       OR submit_operation.schema_version IS DISTINCT FROM 2
       OR submit_operation.kind IS NULL
       OR submit_operation.kind <> ALL(prme._operation_kinds())
       OR submit_operation.payload IS NULL
       OR jsonb_typeof(submit_operation.payload) <> 'object'
       OR pg_column_size(submit_operation.payload) > 1048576
       OR jsonb_path_exists(
           submit_operation.payload, 'strict $.**{32} ? (@.type() == "object" || @.type() == "array")'
       )
       OR submit_operation.payload_hash IS NULL
       OR submit_operation.payload_hash !~ '^[0-9a-f]{64}$'
       OR array_position(submit_operation.dependencies, NULL) IS NOT NULL
       OR (submit_operation.kind = 'add_memory'
           AND coalesce(submit_operation.payload ->> 'user_id', v_user_id) <> v_user_id) THEN
        PERFORM prme._operation_id(submit_operation.operation_id);
        IF submit_operation.schema_version IS DISTINCT FROM 2 THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422',
                MESSAGE = 'schema_version must be 2',
                DETAIL = format('got %s', coalesce(submit_operation.schema_version::text, 'NULL'));
        END IF;
        IF submit_operation.kind IS NULL OR submit_operation.kind <> ALL(prme._operation_kinds()) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422',
                MESSAGE = format('kind must be one of %s', array_to_string(prme._operation_kinds(), ', ')),
                DETAIL = format('got %s', coalesce(quote_literal(left(submit_operation.kind, 80)), 'NULL'));
        END IF;
        IF submit_operation.payload IS NULL OR jsonb_typeof(submit_operation.payload) <> 'object' THEN
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must be a JSON object';
        END IF;
        IF pg_column_size(submit_operation.payload) > 1048576 THEN
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must be at most 1 MiB';
        END IF;
        IF prme._json_too_deep(submit_operation.payload) THEN
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must nest at most 32 levels deep';
        END IF;
        IF submit_operation.payload_hash IS NULL OR submit_operation.payload_hash !~ '^[0-9a-f]{64}$' THEN
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload_hash must be 64 lowercase hex digits';
        END IF;
        IF array_position(submit_operation.dependencies, NULL) IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'dependencies must not contain null';
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'the user_id of an add_memory payload must be the operation''s owner',
            DETAIL = format('got %s', quote_literal(left(submit_operation.payload ->> 'user_id', 80)));
    END IF;
    -- prme._operation_id, written out (its alphabet was checked above): a UUID in lowercase.
    v_id := CASE
        WHEN submit_operation.operation_id ~ '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$'
            THEN lower(submit_operation.operation_id)
        ELSE submit_operation.operation_id
    END;
    -- Each once, in the order given; ids as the ledger stores them.
    IF cardinality(submit_operation.dependencies) > 0 THEN
        v_dependencies := ARRAY(
            SELECT d.id
            FROM unnest(submit_operation.dependencies) WITH ORDINALITY AS t (dependency, n)
            CROSS JOIN LATERAL (SELECT prme._operation_id(t.dependency) AS id) AS d
            GROUP BY d.id
            ORDER BY min(t.n)
        );
        IF cardinality(v_dependencies) > 100 THEN
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'an operation may have at most 100 dependencies';
        END IF;
        IF v_id = ANY(v_dependencies) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR404',
                MESSAGE = 'an operation cannot depend on itself',
                DETAIL = format('operation_id %s is among its dependencies', v_id);
        END IF;
    END IF;

    -- A retry finds its operation and writes nothing (not even a transaction id).
    SELECT o.* INTO v_op
    FROM prme.operations AS o
    WHERE o.user_id = v_user_id AND o.operation_id = v_id;
    IF FOUND THEN
        RETURN prme._stored_receipt_or_conflict(
            v_op, submit_operation.kind, v_dependencies, submit_operation.payload_hash, submit_operation.payload
        );
    END IF;
    -- A new operation: the row carries its accepted event (accepted_seq, see
    -- 410_operations.sql). A concurrent first submit of the same id is waited for
    -- in the primary key, then found.
    INSERT INTO prme.operations (
        user_id, operation_id, schema_version, kind, dependencies, payload_hash, payload, state, blocked_by,
        attempts, next_attempt_at, last_event_seq, created_at, updated_at, accepted_seq
    ) VALUES (
        v_user_id, v_id, 2, submit_operation.kind, v_dependencies,
        submit_operation.payload_hash, submit_operation.payload, 'accepted', '{}', 0, now(), 1, now(), now(),
        prme._next_event_seq()
    )
    ON CONFLICT (user_id, operation_id) DO NOTHING
    RETURNING * INTO v_op;
    IF NOT FOUND THEN
        SELECT o.* INTO v_op
        FROM prme.operations AS o
        WHERE o.user_id = v_user_id AND o.operation_id = v_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING
                ERRCODE = 'serialization_failure',
                MESSAGE = 'a concurrent submit of this operation_id is not visible to this transaction; retry';
        END IF;
        RETURN prme._stored_receipt_or_conflict(
            v_op, submit_operation.kind, v_dependencies, submit_operation.payload_hash, submit_operation.payload
        );
    END IF;

    PERFORM prme._notify_ready();
    -- prme._operation_receipt(v_op, TRUE), written out: one call less on the hot path.
    RETURN ROW(
        v_op.operation_id, v_op.kind, v_op.payload_hash, v_op.dependencies, v_op.state, v_op.blocked_by,
        v_op.result, v_op.error, v_op.attempts, v_op.created_at, v_op.updated_at, TRUE, v_op.last_event_seq
    )::prme.operation_receipt;
END;
$$;

COMMENT ON FUNCTION prme.submit_operation(text, text, integer, text, text[], text, jsonb) IS
'Durably accepts an operation of user_id for the executor. A new operation_id returns the receipt with '
'created = true; the same id with the same kind, dependencies, payload_hash and payload (equal as JSON values) '
'returns the stored receipt (created = false); the same id with anything else raises PR409. operation_id is 1 '
'to 128 characters of A-Z a-z 0-9 . _ : - (a UUID is stored in lowercase); schema_version must be 2; kind one '
'of prme._operation_kinds(); payload a JSON object within prme.ledger_limits() (an add_memory payload''s '
'user_id, when given, the owner); payload_hash 64 lowercase hex digits (PR422 otherwise). Dependencies are kept '
'in the order given; one not submitted yet is waited for (rejected as dependency_missing after the dependency '
'wait); PR404 for the operation itself. The hash is checked by the executor before the operation is applied: a '
'mismatch is rejected with reason payload_hash_mismatch.';

CREATE OR REPLACE FUNCTION prme.get_receipt(user_id text, operation_id text)
RETURNS prme.operation_receipt
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(get_receipt.user_id);
    v_op prme.operations;
BEGIN
    SELECT o.* INTO v_op
    FROM prme.operations AS o
    WHERE o.user_id = v_user_id AND o.operation_id = prme._operation_id(get_receipt.operation_id);
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'operation not found';
    END IF;
    RETURN prme._operation_receipt(v_op, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.get_receipt(text, text) IS
'The receipt of an operation of user_id as it stands now. PR404 when the id is unknown to this owner, PR422 '
'when it is no operation id.';

-- >>> sql/postgres/430_operation_events.sql

CREATE OR REPLACE FUNCTION prme.operation_events(
    user_id text,
    after_seq bigint DEFAULT 0,
    operation_id text DEFAULT NULL,
    max_count integer DEFAULT 100
)
RETURNS SETOF prme.operation_event
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(operation_events.user_id);
    v_id text;
    v_horizon bigint;
    v_offset bigint;
BEGIN
    IF operation_events.max_count IS NULL OR operation_events.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    IF operation_events.after_seq IS NULL OR operation_events.after_seq < 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'after_seq must be a non-negative integer';
    END IF;
    IF operation_events.operation_id IS NOT NULL THEN
        v_id := prme._operation_id(operation_events.operation_id);
        PERFORM FROM prme.operations AS o
        WHERE o.user_id = v_user_id AND o.operation_id = v_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'operation not found';
        END IF;
    END IF;
    -- A STABLE function reads with its caller's snapshot: the xmin below and the
    -- rows read belong to the same snapshot.
    v_horizon := pg_snapshot_xmin(pg_current_snapshot())::text::bigint << 20;

    SELECT s.seq_offset INTO v_offset FROM prme.owner_streams AS s WHERE s.user_id = v_user_id;
    IF FOUND THEN
        -- A moved owner: the imported events (all committed, always visible), then
        -- this server's, whose seq is offset above them.
        RETURN QUERY
        SELECT s.seq, s.operation_id, s.operation_seq, s.state, s.detail, s.created_at
        FROM (
            SELECT i.seq, i.operation_id, i.operation_seq, i.state, i.detail, i.created_at
            FROM prme.imported_operation_events AS i
            WHERE i.user_id = v_user_id AND i.seq > operation_events.after_seq
              AND (v_id IS NULL OR i.operation_id = v_id)
            UNION ALL
            SELECT e.seq + v_offset, e.operation_id, e.operation_seq, e.state, e.detail, e.created_at
            FROM prme.operation_events AS e
            WHERE e.user_id = v_user_id AND e.seq > operation_events.after_seq - v_offset AND e.seq < v_horizon
              AND (v_id IS NULL OR e.operation_id = v_id)
            UNION ALL
            SELECT o.accepted_seq + v_offset, o.operation_id, 1, 'accepted', '{}'::jsonb, o.created_at
            FROM prme.operations AS o
            WHERE o.user_id = v_user_id AND o.accepted_seq > operation_events.after_seq - v_offset
              AND o.accepted_seq < v_horizon
              AND (v_id IS NULL OR o.operation_id = v_id)
        ) AS s
        ORDER BY s.seq
        LIMIT operation_events.max_count;
        RETURN;
    END IF;

    -- Two sources, one stream: the rows of prme.operation_events, and the accepted
    -- events kept in the operation rows (accepted_seq, 410_operations.sql). Each
    -- side is an index range scan in seq order; the union is merged, then cut.
    IF v_id IS NULL THEN
        RETURN QUERY
        SELECT s.seq, s.operation_id, s.operation_seq, s.state, s.detail, s.created_at
        FROM (
            SELECT e.seq, e.operation_id, e.operation_seq, e.state, e.detail, e.created_at
            FROM prme.operation_events AS e
            WHERE e.user_id = v_user_id AND e.seq > operation_events.after_seq AND e.seq < v_horizon
            UNION ALL
            SELECT o.accepted_seq, o.operation_id, 1, 'accepted', '{}'::jsonb, o.created_at
            FROM prme.operations AS o
            WHERE o.user_id = v_user_id AND o.accepted_seq > operation_events.after_seq
              AND o.accepted_seq < v_horizon
        ) AS s
        ORDER BY s.seq
        LIMIT operation_events.max_count;
    ELSE
        RETURN QUERY
        SELECT s.seq, s.operation_id, s.operation_seq, s.state, s.detail, s.created_at
        FROM (
            SELECT e.seq, e.operation_id, e.operation_seq, e.state, e.detail, e.created_at
            FROM prme.operation_events AS e
            WHERE e.user_id = v_user_id AND e.operation_id = v_id
              AND e.seq > operation_events.after_seq AND e.seq < v_horizon
            UNION ALL
            SELECT o.accepted_seq, o.operation_id, 1, 'accepted', '{}'::jsonb, o.created_at
            FROM prme.operations AS o
            WHERE o.user_id = v_user_id AND o.operation_id = v_id
              AND o.accepted_seq > operation_events.after_seq AND o.accepted_seq < v_horizon
        ) AS s
        ORDER BY s.seq
        LIMIT operation_events.max_count;
    END IF;
END;
$$;

COMMENT ON FUNCTION prme.operation_events(text, bigint, text, integer) IS
'Events of user_id''s operations (or of one operation) with seq > after_seq, in seq order, at most max_count. '
'Pass the last seq seen to resume: no event is skipped or repeated, even one whose transaction commits late, '
'because only events of transactions older than every running one are shown, and across a move to another '
'server (prme-pg shard move). PR404 for an unknown operation_id, PR422 for one that is no operation id.';

-- >>> sql/postgres/440_run_operations.sql

CREATE OR REPLACE FUNCTION prme._operation_request_id(operation_id text)
RETURNS uuid
LANGUAGE sql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    -- A UUID id is its own request id (as when ids were uuid); any other id its derived id.
    SELECT CASE
        WHEN operation_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN operation_id::uuid
        ELSE prme.derived_id(operation_id)
    END;
$$;

COMMENT ON FUNCTION prme._operation_request_id(text) IS
'Internal: the request_id an operation passes to reinforce and record_outcome: a UUID id itself, any other id '
'prme.derived_id of it.';

CREATE OR REPLACE FUNCTION prme._operation_lock_key(user_id text, operation_id text)
RETURNS bigint
LANGUAGE sql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT hashtextextended(user_id || E'\n' || operation_id, 7);
$$;

COMMENT ON FUNCTION prme._operation_lock_key(text, text) IS
'Internal: the advisory lock key of an operation id of an owner: a blocking executor holds it shared for a '
'dependency not submitted yet; a commit or rejection of that operation takes it exclusively.';

CREATE OR REPLACE FUNCTION prme._dependency_wait()
RETURNS interval
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT make_interval(secs => CASE WHEN s.setting ~ '^[0-9]{1,9}$' THEN s.setting::integer ELSE 86400 END)
    FROM (SELECT current_setting('prme.dependency_wait_seconds', TRUE) AS setting) AS s;
$$;

COMMENT ON FUNCTION prme._dependency_wait() IS
'Internal: how long a blocked operation waits for a dependency that has not been submitted before it is '
'rejected as dependency_missing: setting prme.dependency_wait_seconds (of the executor''s session), default '
'86400 (one day).';

CREATE OR REPLACE FUNCTION prme._apply_operation(
    op prme.operations,
    parts_budget integer,
    OUT result jsonb,
    OUT parts_used integer,
    OUT progress jsonb
)
RETURNS record
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_payload jsonb := op.payload;
    v_content text;
    v_budget integer;
    v_number numeric;
    v_step record;
    v_node prme.node_view;
    v_event prme.events;
    v_outcome prme.outcome_view;
    v_provenance jsonb;
BEGIN
    parts_used := 0;
    IF op.kind <> ALL(prme._operation_kinds()) THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = format('unknown operation kind %s', op.kind);
    END IF;
    CASE op.kind
        WHEN 'add_node', 'add_memory' THEN
            IF op.kind = 'add_node' THEN
                PERFORM prme._payload_fields(v_payload, op.kind, ARRAY[
                    'content', 'scope', 'namespace', 'kind', 'confidence_base', 'salience_base', 'stability',
                    'decay_profile', 'next_review_at', 'token_budget'
                ], ARRAY['content']);
            ELSE
                -- The reference protocol's memory (docs/LEDGER.md, "Compatibility"): a
                -- node with add_node's defaults; user_id is the owner (checked at submit);
                -- agent_id, session_id and categories stay in the operation and its result.
                PERFORM prme._payload_fields(v_payload, op.kind, ARRAY[
                    'content', 'user_id', 'agent_id', 'session_id', 'categories'
                ], ARRAY['content']);
                PERFORM prme._payload_text(v_payload, 'user_id');
                IF coalesce(jsonb_typeof(v_payload -> 'categories'), 'null') NOT IN ('array', 'null') OR EXISTS (
                    SELECT FROM jsonb_array_elements(
                        CASE WHEN jsonb_typeof(v_payload -> 'categories') = 'array' THEN v_payload -> 'categories' END
                    ) AS c (category)
                    WHERE jsonb_typeof(c.category) <> 'string'
                ) THEN
                    RAISE EXCEPTION USING
                        ERRCODE = 'PR422', MESSAGE = 'payload field categories must be an array of strings';
                END IF;
                v_provenance := jsonb_build_object(
                    'agent_id', prme._payload_text(v_payload, 'agent_id'),
                    'session_id', prme._payload_text(v_payload, 'session_id'),
                    'categories', coalesce(v_payload -> 'categories', 'null'::jsonb)
                );
            END IF;
            -- Validate up front what would otherwise fail only after a long memory's parts.
            v_content := prme._valid_content(prme._payload_text(v_payload, 'content'));
            PERFORM prme._valid_name('scope', coalesce(prme._payload_text(v_payload, 'scope'), 'personal'));
            PERFORM prme._valid_name('namespace', coalesce(prme._payload_text(v_payload, 'namespace'), 'default'));
            PERFORM prme._valid_name('kind', coalesce(prme._payload_text(v_payload, 'kind'), 'fact'));
            v_number := coalesce(prme._payload_number(v_payload, 'token_budget'), 512);
            IF v_number <> trunc(v_number) OR v_number NOT BETWEEN 1 AND 65536 THEN
                RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'token_budget must be an integer from 1 to 65536';
            END IF;
            v_budget := v_number;
            -- A memory longer than the token budget is planned into parts first
            -- (450_long_memories.sql); a token has at least one character, so
            -- shorter text needs no count.
            IF length(v_content) > v_budget AND prme._word_count(v_content) > v_budget THEN
                v_step := prme._long_memory_step(op, v_content, v_budget, parts_budget);
                parts_used := v_step.parts_validated;
                progress := jsonb_build_object('parts', v_step.parts, 'parts_validated', v_step.parts_done);
                IF NOT v_step.complete THEN
                    RETURN;  -- result stays NULL: more parts to go
                END IF;
                v_content := v_step.content_out;
            END IF;
            v_node := prme.add_node(
                user_id => op.user_id,
                content => v_content,
                scope => coalesce(prme._payload_text(v_payload, 'scope'), 'personal'),
                namespace => coalesce(prme._payload_text(v_payload, 'namespace'), 'default'),
                kind => coalesce(prme._payload_text(v_payload, 'kind'), 'fact'),
                confidence_base => coalesce(prme._payload_number(v_payload, 'confidence_base'), 0.5),
                salience_base => coalesce(prme._payload_number(v_payload, 'salience_base'), 0.5),
                stability => coalesce(prme._payload_text(v_payload, 'stability'), 'low'),
                decay_profile => coalesce(prme._payload_text(v_payload, 'decay_profile'), 'medium'),
                next_review_at => prme._payload_time(v_payload, 'next_review_at'),
                node_id => prme.derived_id(op.operation_id)
            );
            result := jsonb_build_object('node_id', v_node.id, 'node_version', v_node.version);
            IF progress IS NOT NULL THEN
                result := result || jsonb_build_object('parts', progress -> 'parts');
            END IF;
            IF v_provenance IS NOT NULL THEN
                result := result || v_provenance;
            END IF;
        WHEN 'add_event' THEN
            PERFORM prme._payload_fields(v_payload, op.kind, ARRAY[
                'content', 'scope', 'namespace', 'kind', 'payload', 'occurred_at'
            ], ARRAY['content']);
            v_event := prme.add_event(
                user_id => op.user_id,
                content => prme._payload_text(v_payload, 'content'),
                scope => coalesce(prme._payload_text(v_payload, 'scope'), 'personal'),
                namespace => coalesce(prme._payload_text(v_payload, 'namespace'), 'default'),
                kind => coalesce(prme._payload_text(v_payload, 'kind'), 'message'),
                payload => coalesce(v_payload -> 'payload', '{}'),
                occurred_at => prme._payload_time(v_payload, 'occurred_at'),
                event_id => prme.derived_id(op.operation_id)
            );
            result := jsonb_build_object('event_id', v_event.id);
        WHEN 'reinforce' THEN
            PERFORM prme._payload_fields(v_payload, op.kind, ARRAY['node_id', 'evidence_id'], ARRAY['node_id']);
            v_node := prme.reinforce(
                node_id => prme._payload_uuid(v_payload, 'node_id'),
                user_id => op.user_id,
                evidence_id => prme._payload_uuid(v_payload, 'evidence_id'),
                request_id => prme._operation_request_id(op.operation_id)
            );
            result := jsonb_build_object('node_id', v_node.id, 'node_version', v_node.version, 'replayed', v_node.replayed);
        WHEN 'archive_node' THEN
            PERFORM prme._payload_fields(v_payload, op.kind, ARRAY['node_id'], ARRAY['node_id']);
            v_node := prme.archive_node(op.user_id, prme._payload_uuid(v_payload, 'node_id'));
            result := jsonb_build_object('node_id', v_node.id, 'node_version', v_node.version);
        WHEN 'record_outcome' THEN
            PERFORM prme._payload_fields(v_payload, op.kind, ARRAY[
                'node_id', 'outcome', 'evidence_id', 'profile_id', 'thread_id', 'notes'
            ], ARRAY['node_id', 'outcome']);
            v_outcome := prme.record_outcome(
                user_id => op.user_id,
                node_id => prme._payload_uuid(v_payload, 'node_id'),
                outcome => prme._payload_text(v_payload, 'outcome'),
                evidence_id => prme._payload_uuid(v_payload, 'evidence_id'),
                profile_id => prme._payload_text(v_payload, 'profile_id'),
                thread_id => prme._payload_text(v_payload, 'thread_id'),
                notes => prme._payload_text(v_payload, 'notes'),
                request_id => prme._operation_request_id(op.operation_id)
            );
            result := jsonb_build_object(
                'outcome_id', v_outcome.id, 'node_id', v_outcome.node_id, 'node_version', v_outcome.node_version,
                'replayed', v_outcome.replayed
            );
        WHEN 'link_correction' THEN
            PERFORM prme._payload_fields(v_payload, op.kind, ARRAY[
                'message', 'candidate_node_ids', 'thread_id'
            ], ARRAY['message', 'candidate_node_ids']);
            -- Exactly one row; keys with no value (node_id when unmatched, inbox_id
            -- when linked) stay in the result as null, so every result has one shape.
            SELECT jsonb_build_object(
                'status', l.status, 'node_id', l.node_id, 'outcome_id', l.outcome_id, 'inbox_id', l.inbox_id,
                'matches', l.matches
            ) INTO STRICT result
            FROM prme.link_correction(
                user_id => op.user_id,
                message => prme._payload_text(v_payload, 'message'),
                candidate_node_ids => prme._payload_uuids(v_payload, 'candidate_node_ids'),
                thread_id => prme._payload_text(v_payload, 'thread_id')
            ) AS l;
        ELSE
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = format('unknown operation kind %s', op.kind);
    END CASE;
END;
$$;

COMMENT ON FUNCTION prme._apply_operation(prme.operations, integer) IS
'Internal: applies one operation through the API functions and returns its result, or NULL while a long '
'memory still has parts to validate (parts_used: validated by this call; progress: parts and parts_validated).';

CREATE OR REPLACE FUNCTION prme._release_dependents(op prme.operations)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_dependent prme.operations;
BEGIN
    -- Wait for any executor that is blocking an operation on this one while it was
    -- not submitted yet: its "blocked" is visible once the lock is ours.
    PERFORM pg_advisory_xact_lock(prme._operation_lock_key(op.user_id, op.operation_id));
    -- Usually nothing waits: a plain look is cheaper than opening the locking loop.
    PERFORM FROM prme.operations AS o
    WHERE o.user_id = op.user_id AND o.state = 'blocked' AND op.operation_id = ANY(o.blocked_by);
    IF NOT FOUND THEN
        RETURN;
    END IF;
    FOR v_dependent IN
        SELECT o.* FROM prme.operations AS o
        WHERE o.user_id = op.user_id AND o.state = 'blocked' AND op.operation_id = ANY(o.blocked_by)
        ORDER BY o.operation_id COLLATE "C"
        FOR UPDATE
    LOOP
        v_dependent.blocked_by := array_remove(v_dependent.blocked_by, op.operation_id);
        IF cardinality(v_dependent.blocked_by) > 0 THEN
            UPDATE prme.operations AS o SET blocked_by = v_dependent.blocked_by
            WHERE o.user_id = v_dependent.user_id AND o.operation_id = v_dependent.operation_id;
        ELSE
            UPDATE prme.operations AS o SET
                state = 'accepted',
                blocked_by = '{}',
                next_attempt_at = now(),
                last_event_seq = o.last_event_seq + 1,
                updated_at = now()
            WHERE o.user_id = v_dependent.user_id AND o.operation_id = v_dependent.operation_id
            RETURNING o.* INTO v_dependent;
            PERFORM prme._append_operation_event(
                v_dependent, jsonb_build_object('released_by', op.operation_id)
            );
        END IF;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION prme._release_dependents(prme.operations) IS
'Internal: after op committed, drops it from the blocked_by of its blocked dependents and releases '
'(state accepted) those with nothing left to wait for.';

CREATE OR REPLACE FUNCTION prme._reject_operation(op prme.operations, error jsonb)
RETURNS prme.operations
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_rejected prme.operations;
    v_dependent prme.operations;
    v_frontier text[];
    v_next text[];
    v_cause text;
BEGIN
    UPDATE prme.operations AS o SET
        state = 'rejected',
        blocked_by = '{}',
        error = _reject_operation.error,
        result = NULL,
        attempts = op.attempts,
        worker = op.worker,
        last_event_seq = o.last_event_seq + 1,
        updated_at = now()
    WHERE o.user_id = op.user_id AND o.operation_id = op.operation_id
    RETURNING o.* INTO v_rejected;
    PERFORM prme._append_operation_event(v_rejected, jsonb_build_object('error', _reject_operation.error));
    -- As in prme._release_dependents: see dependents blocked on it before it was submitted.
    PERFORM pg_advisory_xact_lock(prme._operation_lock_key(op.user_id, op.operation_id));

    -- Whatever waits for a rejected operation can never run: reject it too, transitively.
    v_frontier := ARRAY[op.operation_id];
    WHILE cardinality(v_frontier) > 0 LOOP
        v_next := '{}';
        FOR v_dependent IN
            SELECT o.* FROM prme.operations AS o
            WHERE o.user_id = op.user_id AND o.state = 'blocked' AND o.blocked_by && v_frontier
            ORDER BY o.operation_id COLLATE "C"
            FOR UPDATE
        LOOP
            v_cause := (
                SELECT d FROM unnest(v_dependent.blocked_by) AS d WHERE d = ANY(v_frontier) ORDER BY d COLLATE "C" LIMIT 1
            );
            UPDATE prme.operations AS o SET
                state = 'rejected',
                blocked_by = '{}',
                error = jsonb_build_object(
                    'reason', 'dependency_rejected',
                    'dependency', v_cause,
                    'message', format('dependency %s was rejected', v_cause)
                ),
                last_event_seq = o.last_event_seq + 1,
                updated_at = now()
            WHERE o.user_id = v_dependent.user_id AND o.operation_id = v_dependent.operation_id
            RETURNING o.* INTO v_dependent;
            PERFORM prme._append_operation_event(v_dependent, jsonb_build_object('error', v_dependent.error));
            v_next := v_next || v_dependent.operation_id;
        END LOOP;
        v_frontier := v_next;
    END LOOP;
    RETURN v_rejected;
END;
$$;

COMMENT ON FUNCTION prme._reject_operation(prme.operations, jsonb) IS
'Internal: marks op rejected with error (a JSON object with reason and message) and rejects every blocked '
'operation that depends on it, directly or not, with reason dependency_rejected.';

CREATE OR REPLACE FUNCTION prme._execute_operation(
    user_id text,
    operation_id text,
    worker text,
    parts_budget integer,
    OUT outcome text,
    OUT parts_used integer
)
RETURNS record
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_op prme.operations;
    v_rejected text[];
    v_open text[];
    v_missing text[];
    v_found text[];
    v_applied record;
    v_hash text;
BEGIN
    parts_used := 0;
    -- The claim holds the row lock; read the row as it is now.
    SELECT o.* INTO v_op
    FROM prme.operations AS o
    WHERE o.user_id = _execute_operation.user_id AND o.operation_id = _execute_operation.operation_id;
    IF NOT FOUND OR v_op.state NOT IN ('accepted', 'processing', 'blocked') THEN
        outcome := 'skipped';
        RETURN;
    END IF;

    -- The first look (accepted, never tried, no event but "accepted"): is the
    -- declared hash the payload's? Later looks (released, retried) follow one
    -- that checked. prme._jcs raises PR422 for a payload it cannot write
    -- exactly, which rejects the operation as invalid_payload (_operation_failed).
    IF v_op.state = 'accepted' AND v_op.attempts = 0 AND v_op.last_event_seq = 1 THEN
        v_hash := prme._sha256_hex(prme._jcs(v_op.payload));
        IF v_hash <> v_op.payload_hash THEN
            v_op.worker := _execute_operation.worker;
            PERFORM prme._reject_operation(v_op, jsonb_build_object(
                'reason', 'payload_hash_mismatch',
                'sqlstate', 'PR422',
                'message', 'payload_hash does not match the payload',
                'detail', format('sha256 of the payload''s RFC 8785 form is %s', v_hash)
            ));
            outcome := 'rejected';
            RETURN;
        END IF;
    END IF;

    IF v_op.state IN ('accepted', 'blocked') AND cardinality(v_op.dependencies) > 0 THEN
        SELECT
            coalesce(array_agg(o.operation_id) FILTER (WHERE o.state = 'rejected'), '{}'),
            coalesce(array_agg(o.operation_id) FILTER (WHERE o.state NOT IN ('committed', 'rejected')), '{}'),
            coalesce(array_agg(o.operation_id), '{}')
        INTO v_rejected, v_open, v_found
        FROM prme.operations AS o
        WHERE o.user_id = v_op.user_id AND o.operation_id = ANY(v_op.dependencies);
        v_missing := ARRAY(SELECT x FROM unnest(v_op.dependencies) AS x WHERE x <> ALL(v_found));
        IF cardinality(v_rejected) = 0 AND cardinality(v_open) + cardinality(v_missing) > 0 THEN
            -- Hold the open dependencies still until this transaction ends, so none
            -- of them can finish between this look and the commit of "blocked"
            -- (its commit would look for blocked dependents before ours is visible).
            -- NOWAIT: one that is being executed right now raises 55P03, and this
            -- operation is simply tried again in a later call. A dependency not
            -- submitted yet has no row to lock: its advisory lock stands in, taken
            -- before the look below, which sees it if it was submitted meanwhile.
            IF EXISTS (
                SELECT FROM unnest(v_missing) AS m
                WHERE NOT pg_try_advisory_xact_lock_shared(prme._operation_lock_key(v_op.user_id, m))
            ) THEN
                outcome := 'skipped';
                RETURN;
            END IF;
            SELECT
                coalesce(array_agg(d.operation_id) FILTER (WHERE d.state = 'rejected'), '{}'),
                coalesce(array_agg(d.operation_id) FILTER (WHERE d.state NOT IN ('committed', 'rejected')), '{}'),
                coalesce(array_agg(d.operation_id), '{}')
            INTO v_rejected, v_open, v_found
            FROM (
                SELECT o.operation_id, o.state FROM prme.operations AS o
                WHERE o.user_id = v_op.user_id AND o.operation_id = ANY(v_open || v_missing)
                ORDER BY o.operation_id COLLATE "C"
                FOR SHARE NOWAIT
            ) AS d;
            v_missing := ARRAY(SELECT x FROM unnest(v_missing) AS x WHERE x <> ALL(v_found));
            -- Waiting: the open ones and the ones not submitted yet.
            v_open := v_open || v_missing;
        END IF;
        -- Causality in the stream: seq follows the transaction id, so a dependency
        -- that finished in a transaction younger than this one would show its
        -- outcome after this operation's. Leave the operation to a later call
        -- (a new transaction, hence a larger id).
        PERFORM FROM prme.operation_events AS e
        WHERE e.user_id = v_op.user_id AND e.operation_id = ANY(v_op.dependencies)
          AND e.seq >= (pg_current_xact_id()::text::bigint + 1) << 20;
        IF FOUND THEN
            outcome := 'skipped';
            RETURN;
        END IF;
        v_op.worker := _execute_operation.worker;
        IF cardinality(v_rejected) > 0 THEN
            v_rejected := ARRAY(SELECT x FROM unnest(v_rejected) AS x ORDER BY x COLLATE "C");
            PERFORM prme._reject_operation(v_op, jsonb_build_object(
                'reason', 'dependency_rejected',
                'dependency', v_rejected[1],
                'message', format('dependency %s was rejected', v_rejected[1])
            ));
            outcome := 'rejected';
            RETURN;
        END IF;
        IF cardinality(v_missing) > 0 AND now() >= v_op.created_at + prme._dependency_wait() THEN
            v_missing := ARRAY(SELECT x FROM unnest(v_missing) AS x ORDER BY x COLLATE "C");
            PERFORM prme._reject_operation(v_op, jsonb_build_object(
                'reason', 'dependency_missing',
                'dependency', v_missing[1],
                'message', format(
                    'dependency %s was not submitted within %s seconds', v_missing[1],
                    extract(EPOCH FROM prme._dependency_wait())::bigint
                )
            ));
            outcome := 'rejected';
            RETURN;
        END IF;
        IF v_op.state = 'blocked' AND cardinality(v_open) > 0 AND cardinality(v_missing) = 0 THEN
            -- Its wait is over and everything it waits for exists: does it wait for itself?
            PERFORM FROM (
                WITH RECURSIVE reach (id) AS (
                    SELECT x FROM unnest(v_op.dependencies) AS x
                    UNION
                    SELECT d
                    FROM reach AS r
                    JOIN prme.operations AS o ON o.user_id = v_op.user_id AND o.operation_id = r.id
                    CROSS JOIN LATERAL unnest(o.dependencies) AS d
                    WHERE o.state = 'blocked' OR o.state = 'accepted'
                )
                SELECT FROM reach WHERE reach.id = v_op.operation_id
            ) AS c;
            IF FOUND THEN
                PERFORM prme._reject_operation(v_op, jsonb_build_object(
                    'reason', 'dependency_cycle',
                    'message', 'the operation depends on itself through its dependencies'
                ));
                outcome := 'rejected';
                RETURN;
            END IF;
        END IF;
        IF cardinality(v_open) > 0 THEN
            v_open := ARRAY(SELECT x FROM unnest(v_open) AS x ORDER BY x COLLATE "C");
            IF v_op.state = 'accepted' THEN
                UPDATE prme.operations AS o SET
                    state = 'blocked',
                    blocked_by = v_open,
                    next_attempt_at = greatest(o.created_at + prme._dependency_wait(), now()),
                    last_event_seq = o.last_event_seq + 1,
                    updated_at = now()
                WHERE o.user_id = v_op.user_id AND o.operation_id = v_op.operation_id
                RETURNING o.* INTO v_op;
                PERFORM prme._append_operation_event(v_op, jsonb_build_object('blocked_by', v_open));
            ELSE
                -- Looked at again at the end of its wait: it waits one more period.
                UPDATE prme.operations AS o SET
                    blocked_by = v_open,
                    next_attempt_at = greatest(o.created_at + prme._dependency_wait(), now() + prme._dependency_wait())
                WHERE o.user_id = v_op.user_id AND o.operation_id = v_op.operation_id;
            END IF;
            outcome := 'blocked';
            RETURN;
        END IF;
    END IF;

    IF v_op.state = 'blocked' THEN
        -- Looked at again, and everything it waited for has committed: release it here.
        UPDATE prme.operations AS o SET
            state = 'accepted',
            blocked_by = '{}',
            next_attempt_at = now(),
            last_event_seq = o.last_event_seq + 1,
            updated_at = now()
        WHERE o.user_id = v_op.user_id AND o.operation_id = v_op.operation_id
        RETURNING o.* INTO v_op;
        PERFORM prme._append_operation_event(v_op, jsonb_build_object('released_by', NULL));
    END IF;

    IF v_op.state = 'accepted' THEN
        v_op.state := 'processing';
        v_op.attempts := v_op.attempts + 1;
        v_op.worker := _execute_operation.worker;
        v_op.last_event_seq := v_op.last_event_seq + 1;
        v_op.updated_at := now();
        -- The event now; the row is written once, below, together with the outcome.
        PERFORM prme._append_operation_event(v_op, jsonb_build_object(
            'attempt', v_op.attempts, 'worker', v_op.worker
        ));
    END IF;

    v_applied := prme._apply_operation(v_op, parts_budget);
    parts_used := v_applied.parts_used;
    IF v_applied.result IS NULL THEN
        -- A long memory with parts still to validate: keep it processing, report progress.
        v_op.last_event_seq := v_op.last_event_seq + 1;
        UPDATE prme.operations AS o SET
            state = v_op.state,
            attempts = v_op.attempts,
            worker = v_op.worker,
            last_event_seq = v_op.last_event_seq,
            updated_at = v_op.updated_at
        WHERE o.user_id = v_op.user_id AND o.operation_id = v_op.operation_id;
        PERFORM prme._append_operation_event(v_op, v_applied.progress);
        outcome := 'progress';
        RETURN;
    END IF;

    v_op.state := 'committed';
    v_op.result := v_applied.result;
    v_op.error := NULL;
    v_op.last_event_seq := v_op.last_event_seq + 1;
    v_op.updated_at := now();
    UPDATE prme.operations AS o SET
        state = v_op.state,
        result = v_op.result,
        error = NULL,
        attempts = v_op.attempts,
        worker = v_op.worker,
        last_event_seq = v_op.last_event_seq,
        updated_at = v_op.updated_at
    WHERE o.user_id = v_op.user_id AND o.operation_id = v_op.operation_id;
    PERFORM prme._append_operation_event(v_op, jsonb_build_object('result', v_op.result));
    PERFORM prme._release_dependents(v_op);
    outcome := 'committed';
END;
$$;

COMMENT ON FUNCTION prme._execute_operation(text, text, text, integer) IS
'Internal: one step of one claimed operation: on the first look check its payload_hash (reject a mismatch), '
'check its dependencies (block, reject or go on; a blocked one at the end of its dependency wait), apply it, '
'and record the outcome (committed, blocked, rejected, progress or skipped).';

CREATE OR REPLACE FUNCTION prme._operation_failed(
    user_id text,
    operation_id text,
    worker text,
    sqlstate text,
    message text,
    detail text
)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_op prme.operations;
    v_reason text;
    v_error jsonb;
    v_attempt integer;
BEGIN
    -- Lock contention says nothing about the operation: leave it for a later call.
    IF _operation_failed.sqlstate IN ('40001', '40P01', '55P03') THEN
        RETURN 'skipped';
    END IF;
    SELECT o.* INTO v_op
    FROM prme.operations AS o
    WHERE o.user_id = _operation_failed.user_id AND o.operation_id = _operation_failed.operation_id
    FOR UPDATE;
    IF NOT FOUND OR v_op.state NOT IN ('accepted', 'processing') THEN
        RETURN 'skipped';
    END IF;

    v_reason := CASE
        WHEN _operation_failed.sqlstate = 'PR422' OR left(_operation_failed.sqlstate, 2) = '22' THEN 'invalid_payload'
        WHEN _operation_failed.sqlstate = 'PR404' THEN 'not_found'
        WHEN _operation_failed.sqlstate IN ('PR409', '23505') THEN 'conflict'
        WHEN left(_operation_failed.sqlstate, 2) = '23' THEN 'invalid_payload'
    END;
    v_error := jsonb_build_object(
        'reason', coalesce(v_reason, 'transient'),
        'sqlstate', _operation_failed.sqlstate,
        'message', _operation_failed.message
    );
    IF _operation_failed.detail IS NOT NULL AND _operation_failed.detail <> '' THEN
        v_error := v_error || jsonb_build_object('detail', _operation_failed.detail);
    END IF;
    -- The failed try was rolled back, its attempt count with it: count it here.
    -- (A long memory that was already processing counted its attempt earlier.)
    v_attempt := v_op.attempts + CASE WHEN v_op.state = 'accepted' THEN 1 ELSE 0 END;
    v_op.attempts := v_attempt;
    v_op.worker := _operation_failed.worker;

    IF v_reason IS NOT NULL THEN
        PERFORM prme._reject_operation(v_op, v_error);
        RETURN 'rejected';
    END IF;
    IF v_attempt >= 5 THEN
        PERFORM prme._reject_operation(v_op, jsonb_build_object(
            'reason', 'attempts_exhausted',
            'message', format('gave up after %s attempts', v_attempt),
            'last_error', v_error
        ));
        RETURN 'rejected';
    END IF;

    UPDATE prme.operations AS o SET
        state = 'accepted',
        attempts = v_attempt,
        error = v_error,
        worker = v_op.worker,
        next_attempt_at = now() + least(2 ^ (v_attempt - 1), 60) * interval '1 second',
        last_event_seq = o.last_event_seq + 1,
        updated_at = now()
    WHERE o.user_id = v_op.user_id AND o.operation_id = v_op.operation_id
    RETURNING o.* INTO v_op;
    PERFORM prme._append_operation_event(v_op, jsonb_build_object(
        'retry', TRUE,
        'attempt', v_attempt,
        'retry_at', prme._json_time(v_op.next_attempt_at)::jsonb,
        'error', v_error
    ));
    RETURN 'retry';
END;
$$;

COMMENT ON FUNCTION prme._operation_failed(text, text, text, text, text, text) IS
'Internal: records a failed try of an operation: rejected for invalid input, not found or conflict; back to '
'accepted with backoff for a transient error (rejected as attempts_exhausted on attempt 5); untouched for '
'lock contention. Returns the outcome.';

CREATE OR REPLACE FUNCTION prme.run_operations(
    max_count integer DEFAULT 10,
    worker text DEFAULT 'sql',
    max_parts integer DEFAULT 64
)
RETURNS TABLE (
    user_id text,
    operation_id text,
    kind text,
    state text,
    outcome text,
    attempts integer
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_users text[];
    v_ids text[];
    v_claimed record;
    v_parts_left integer;
    v_step record;
    v_sqlstate text;
    v_message text;
    v_detail text;
BEGIN
    IF run_operations.max_count IS NULL OR run_operations.max_count NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 1000';
    END IF;
    IF run_operations.worker IS NULL OR length(run_operations.worker) NOT BETWEEN 1 AND 200
       OR run_operations.worker ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'worker must be 1 to 200 characters, no control characters';
    END IF;
    IF run_operations.max_parts IS NULL OR run_operations.max_parts NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_parts must be between 1 and 100000';
    END IF;
    v_parts_left := run_operations.max_parts;

    -- Claim: oldest first, skipping rows another executor holds.
    v_users := '{}';
    v_ids := '{}';
    FOR v_claimed IN
        SELECT q.user_id, q.operation_id
        FROM prme.operations AS q
        WHERE q.state IN ('accepted', 'processing', 'blocked') AND q.next_attempt_at <= now()
        ORDER BY q.next_attempt_at
        LIMIT run_operations.max_count
        FOR UPDATE SKIP LOCKED
    LOOP
        v_users := v_users || v_claimed.user_id;
        v_ids := v_ids || v_claimed.operation_id;
    END LOOP;

    FOR v_i IN 1 .. cardinality(v_ids) LOOP
        user_id := v_users[v_i];
        operation_id := v_ids[v_i];
        BEGIN
            v_step := prme._execute_operation(user_id, operation_id, run_operations.worker, v_parts_left);
            outcome := v_step.outcome;
            v_parts_left := greatest(v_parts_left - v_step.parts_used, 1);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS
                v_sqlstate = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
            BEGIN
                outcome := prme._operation_failed(
                    user_id, operation_id, run_operations.worker, v_sqlstate, v_message, v_detail
                );
            EXCEPTION WHEN OTHERS THEN
                outcome := 'skipped';  -- could not even record the failure: try again later
            END;
        END;
        SELECT o.kind, o.state, o.attempts INTO kind, state, attempts
        FROM prme.operations AS o
        WHERE o.user_id = run_operations.user_id AND o.operation_id = run_operations.operation_id;
        RETURN NEXT;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION prme.run_operations(integer, text, integer) IS
'The executor: claims up to max_count claimable operations of any owner (FOR UPDATE SKIP LOCKED; blocked ones '
'at the end of their dependency wait), applies each through the API functions in this transaction (exactly '
'once), and returns one row per claimed operation '
'with its state and the outcome of this call: committed, rejected, blocked, retry, progress (a long memory with '
'parts left; at most max_parts parts are validated per call) or skipped. worker names the caller in receipts.';

-- >>> sql/postgres/450_long_memories.sql

CREATE OR REPLACE FUNCTION prme.operation_parts(user_id text, operation_id text)
RETURNS TABLE (
    part_no integer,
    tokenizer text,
    token_start integer,
    token_end integer,
    char_start integer,
    char_end integer,
    sha256 text,
    state text,
    planned_at timestamptz,
    validated_at timestamptz
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(operation_parts.user_id);
    v_id text := prme._operation_id(operation_parts.operation_id);
BEGIN
    PERFORM FROM prme.operations AS o
    WHERE o.user_id = v_user_id AND o.operation_id = v_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'operation not found';
    END IF;
    RETURN QUERY
    SELECT p.part_no, p.tokenizer, p.token_start, p.token_end, p.char_start, p.char_end, p.sha256, p.state,
        p.planned_at, p.validated_at
    FROM prme.operation_parts AS p
    WHERE p.user_id = v_user_id AND p.operation_id = v_id
    ORDER BY p.part_no;
END;
$$;

COMMENT ON FUNCTION prme.operation_parts(text, text) IS
'The stored plan of a long add_node or add_memory operation of user_id: its parts in order, with token and character ranges, '
'hash and state. No rows for an operation that was not planned; PR404 for an unknown operation.';

CREATE OR REPLACE FUNCTION prme._long_memory_step(
    op prme.operations,
    content text,
    token_budget integer,
    parts_budget integer,
    OUT complete boolean,
    OUT content_out text,
    OUT parts integer,
    OUT parts_done integer,
    OUT parts_validated integer
)
RETURNS record
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_part prme.operation_parts;
    v_text text;
BEGIN
    parts_validated := 0;
    -- 1. Plan once; a later call (after a restart too) finds the stored plan.
    PERFORM FROM prme.operation_parts AS p
    WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id
    LIMIT 1;
    IF NOT FOUND THEN
        INSERT INTO prme.operation_parts (
            user_id, operation_id, part_no, tokenizer, token_start, token_end, char_start, char_end,
            sha256, state, planned_at
        )
        SELECT
            op.user_id, op.operation_id, p.part_no, 'words_v1', p.token_start, p.token_end, p.char_start, p.char_end,
            prme._sha256_hex(substr(content, p.char_start + 1, p.char_end - p.char_start)), 'planned', now()
        FROM prme._plan_parts(content, token_budget) AS p;
    END IF;

    -- 2. Validate the next parts, skipping those already validated.
    FOR v_part IN
        SELECT p.* FROM prme.operation_parts AS p
        WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id AND p.state = 'planned'
        ORDER BY p.part_no
        LIMIT parts_budget
    LOOP
        v_text := substr(content, v_part.char_start + 1, v_part.char_end - v_part.char_start);
        IF v_part.tokenizer <> 'words_v1'
           OR length(v_text) <> v_part.char_end - v_part.char_start
           OR prme._sha256_hex(v_text) <> v_part.sha256
           OR prme._word_count(v_text) <> v_part.token_end - v_part.token_start THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422',
                MESSAGE = format('part %s of the stored plan does not match the payload', v_part.part_no);
        END IF;
        UPDATE prme.operation_parts AS p SET state = 'validated', validated_at = clock_timestamp()
        WHERE p.user_id = v_part.user_id AND p.operation_id = v_part.operation_id AND p.part_no = v_part.part_no;
        parts_validated := parts_validated + 1;
    END LOOP;

    SELECT count(*), count(*) FILTER (WHERE p.state = 'validated')
    INTO parts, parts_done
    FROM prme.operation_parts AS p
    WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id;
    complete := parts = parts_done;
    IF NOT complete THEN
        RETURN;
    END IF;

    -- 3. The memory is what the validated parts assemble to.
    SELECT string_agg(substr(content, p.char_start + 1, p.char_end - p.char_start), '' ORDER BY p.part_no)
    INTO content_out
    FROM prme.operation_parts AS p
    WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id AND p.state = 'validated';
    IF content_out IS DISTINCT FROM content THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'the validated parts do not assemble the content';
    END IF;
END;
$$;

COMMENT ON FUNCTION prme._long_memory_step(prme.operations, text, integer, integer) IS
'Internal: one executor step of a long add_node or add_memory: plans it into parts (once), validates up to parts_budget '
'parts, and once all are validated returns the content assembled from them (complete = true).';

GRANT EXECUTE ON FUNCTION prme.submit_operation(text, text, integer, text, text[], text, jsonb) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.get_receipt(text, text) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.operation_events(text, bigint, text, integer) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.operation_parts(text, text) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.derived_id(text) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.run_operations(integer, text, integer) TO prme_app;
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (17, 'reference_protocol', 'b5c9fe8134efc4d7e9b4d58d972d283977a3546a4027684b9751b9d51faab4e2');

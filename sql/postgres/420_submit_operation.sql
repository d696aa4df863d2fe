-- =============================================================================
-- prme-pg: submit_operation and get_receipt
--
-- submit_operation durably accepts a write for later execution. The operation
-- id is the caller's, stable across retries, and scoped by owner: 1 to 128
-- characters of A-Z a-z 0-9 . _ : - (a UUID is one of them; prme._operation_id):
--   new id                         -> accepted, receipt with created = true
--   same id, same operation        -> the stored receipt as it stands now (created = false)
--   same id, anything else differs -> PR409; the stored operation is untouched
-- "Same operation" means the same kind, schema_version, dependencies (as a set),
-- declared payload_hash and payload (equal as JSON values: the same members,
-- strings and numbers, whatever the spacing, member order or number spelling;
-- for every payload that can commit this is equality of canonical hashes, since
-- the canonicaliser refuses numbers it cannot write exactly).
-- A first submit checks what it needs to answer correctly and nothing more
-- (docs/LEDGER.md, "What a 202 proves"): the owner, the id, schema_version, a
-- known kind (prme._operation_kinds()), dependencies well-formed, the payload a
-- JSON object within prme.ledger_limits() (an add_memory payload naming no owner
-- but the operation's), the declared payload_hash 64 lowercase hex digits. It
-- does not recompute the hash: the executor does, before it applies the
-- operation (440_run_operations.sql), and rejects a mismatch with reason
-- payload_hash_mismatch and a payload it cannot canonicalise with reason
-- invalid_payload. A stored hash therefore describes the stored payload once the
-- operation has committed, not before.
-- Dependencies are kept in the order given (each once). One that this owner has
-- not submitted yet is waited for: the executor blocks the operation until it
-- commits, and rejects it with reason dependency_missing when it has not been
-- submitted within the dependency wait (docs/LEDGER.md). An operation cannot
-- depend on itself (PR404, as for an unknown id).
-- A new operation is one row: its "accepted" event (operation_seq 1) is kept in
-- the row (accepted_seq), not in a second one. It wakes listeners with NOTIFY
-- prme_operations, 'ready', throttled to one per prme.notify_interval_ms (see
-- prme._notify_ready in 410_operations.sql).
-- =============================================================================

CREATE FUNCTION prme.ledger_limits(
    OUT max_payload_bytes integer,
    OUT max_payload_depth integer,
    OUT max_dependencies integer
)
RETURNS record
LANGUAGE sql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    -- The numbers prme.submit_operation and the canonicaliser enforce (written
    -- there as literals: a call per submit would cost more than the lookup saves).
    SELECT 1048576, 32, 100;
$$;

COMMENT ON FUNCTION prme.ledger_limits() IS
'The bounds of an operation that prme.submit_operation enforces with PR422: the payload at most '
'max_payload_bytes (jsonb size) and max_payload_depth levels deep (the payload object is level 1), at most '
'max_dependencies distinct dependencies.';

CREATE FUNCTION prme._stored_receipt_or_conflict(
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

CREATE FUNCTION prme.submit_operation(
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
    -- prme._operation_id, written out (its alphabet was checked above): a UUID in any text
    -- form as lowercase 8-4-4-4-12 (length 36 after the match: that form, with no urn prefix).
    v_id := CASE
        WHEN submit_operation.operation_id
            ~* '^(urn:uuid:)?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$'
            THEN CASE
                WHEN length(submit_operation.operation_id) = 36 THEN lower(submit_operation.operation_id)
                ELSE regexp_replace(submit_operation.operation_id, '^urn:uuid:', '', 'i')::uuid::text
            END
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

CREATE FUNCTION prme.get_receipt(user_id text, operation_id text)
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

REVOKE ALL ON FUNCTION prme.submit_operation(text, text, integer, text, text[], text, jsonb) FROM public;
GRANT EXECUTE ON FUNCTION prme.submit_operation(text, text, integer, text, text[], text, jsonb) TO prme_app;
REVOKE ALL ON FUNCTION prme.get_receipt(text, text) FROM public;
GRANT EXECUTE ON FUNCTION prme.get_receipt(text, text) TO prme_app;
REVOKE ALL ON FUNCTION prme.ledger_limits() FROM public;
GRANT EXECUTE ON FUNCTION prme.ledger_limits() TO prme_app;

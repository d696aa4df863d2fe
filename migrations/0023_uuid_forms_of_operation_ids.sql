-- prme-pg migration 0023_uuid_forms_of_operation_ids: a UUID operation id is one id whatever its
-- text form (issue 32, item 10). Until now only the 8-4-4-4-12 form was lowercased; 32 hex digits
-- (0F8FAD5BD9CB469FA16570867728950E) or a urn:uuid: URN -- both within the id alphabet -- were
-- stored as given, so one logical operation could be stored twice, with two derived memory ids.
-- prme._operation_id (every reader of an id: get_receipt, operation_events, operation_parts,
-- derived_id, dependencies) and submit_operation's inline copy of it now store each of those
-- forms, any case, as lowercase 8-4-4-4-12 (docs/LEDGER.md, "Compatibility"). Rows stored
-- before keep their ids: text ids came with 0017, unreleased until this one.
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0023_uuid_forms_of_operation_ids.sql
-- (or prme-pg migrate). It replaces functions: catalog locks only, each held for a moment.
-- Its body is copied from sql/postgres/030_validation.sql, sql/postgres/420_submit_operation.sql.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/030_validation.sql

CREATE OR REPLACE FUNCTION prme._operation_id(operation_id text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- 1 to 128 characters of a path-safe alphabet (docs/LEDGER.md, "Compatibility").
    -- A UUID is one id whatever its text form -- 8-4-4-4-12 or 32 hex digits, with or without
    -- "urn:uuid:", any case -- stored as lowercase 8-4-4-4-12, as the ledger stored UUID ids
    -- before ids were text, so a retry in any form finds its operation.
    IF operation_id IS NULL OR operation_id !~ '^[A-Za-z0-9._:-]{1,128}$' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'an operation id must be 1 to 128 characters of A-Z, a-z, 0-9, ".", "_", ":" and "-"',
            DETAIL = format('got %s', coalesce(quote_literal(left(operation_id, 80)), 'NULL'));
    END IF;
    IF operation_id ~* '^(urn:uuid:)?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$' THEN
        RETURN regexp_replace(operation_id, '^urn:uuid:', '', 'i')::uuid::text;
    END IF;
    RETURN operation_id;
END;
$$;

COMMENT ON FUNCTION prme._operation_id(text) IS
'Internal: an operation id as the ledger stores it (a UUID, in any of its text forms, as lowercase 8-4-4-4-12; '
'any other id as given); PR422 unless '
'it is 1 to 128 characters of A-Z a-z 0-9 . _ : -.';

-- >>> sql/postgres/420_submit_operation.sql

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
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (23, 'uuid_forms_of_operation_ids', '138fb798ac0e8bc3ee20f2e19b3db1317fb84f83ea1a28a2db1089e883dd9ef2');

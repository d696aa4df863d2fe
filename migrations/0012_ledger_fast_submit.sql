-- prme-pg migration 0012_ledger_fast_submit: a submit accepts durably first; the executor
-- checks the payload's hash before it applies the operation (issue 16), and one payload_hash
-- never means two payloads (issue 17, item 9).
--   * prme.submit_operation no longer recomputes the payload's RFC 8785 hash on a first submit:
--     it checks the owner, id, schema_version, kind, dependencies, that the payload is a JSON
--     object within the limits (1 MiB, and now 32 levels deep: prme.ledger_limits()) and that
--     the declared payload_hash is 64 lowercase hex digits, and stores the declared hash.
--     A resubmit compares the payload itself (equal as JSON values) and the declared hash.
--   * The executor recomputes the hash on its first look at an operation: a mismatch is
--     rejected with reason payload_hash_mismatch, never applied.
--   * The canonicaliser refuses (PR422) a number whose canonical text does not denote it
--     exactly (0.10000000000000000001, 2^53 + 1), and canonical_json and payload_hash refuse
--     values nested deeper than 32 levels.
--   * prme.operations drops the two CHECK constraints that repeated submit_operation's own
--     checks with regular expressions (kind, payload_hash): about a tenth of a submit. The
--     three cheap ones measured with them (schema_version, dependencies, payload) cost nothing
--     measurable and stay, as do the state machine's.
-- Operations accepted before this migration had their hash checked at submit; the executor
-- checks it once more, harmlessly.
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0012_ledger_fast_submit.sql
-- (or prme-pg migrate). Locks: ACCESS EXCLUSIVE on prme.operations for the constraint drops
-- (catalog only, no scan or rewrite: a moment), catalog locks for the functions.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/410_operations.sql: the regular expressions submit_operation applies itself are
-- not applied twice

ALTER TABLE prme.operations
DROP CONSTRAINT operations_kind_check,
DROP CONSTRAINT operations_payload_hash_check;

COMMENT ON COLUMN prme.operations.payload_hash IS
'The sha256 hex of the RFC 8785 canonical form of payload that the client declared; the executor recomputes it '
'before applying the operation and rejects a mismatch (payload_hash_mismatch). Proven only once committed.';

-- >>> sql/postgres/400_jcs.sql: numbers without an exact double form are refused; canonical_json
-- and payload_hash refuse values nested deeper than 32 levels

CREATE OR REPLACE FUNCTION prme._jcs_number(value numeric)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text text;
BEGIN
    -- 1. Integers that a double holds exactly: their own digits (the common case).
    IF value = trunc(value) AND abs(value) <= 9007199254740992 THEN
        RETURN trunc(value)::text;
    END IF;
    -- 2. At most 15 significant digits (DBL_DIG) and 1e-6 <= |value| < 1e21: the
    -- decimal survives a round trip through a double, so it is the shortest form,
    -- and ECMAScript writes it without an exponent: numeric's own text, trailing
    -- zeros cut.
    IF abs(value) >= 0.000001 AND abs(value) < 1e21 THEN
        v_text := trim_scale(value)::text;
        IF length(ltrim(translate(v_text, '-.', ''), '0')) <= 15 THEN
            RETURN v_text;
        END IF;
    END IF;
    -- 3. Everything else through float8. Out of range means a result of infinity
    -- or an underflow to zero, which the cast refuses; only extreme magnitudes
    -- pay for the subtransaction that catches it.
    IF abs(value) > 1e300 OR abs(value) < 1e-300 THEN
        BEGIN
            v_text := prme._jcs_double(value::float8);
        EXCEPTION WHEN numeric_value_out_of_range THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422',
                MESSAGE = 'a JSON number is out of the range of an IEEE 754 double',
                DETAIL = format('got %s', btrim(to_char(value, '9.9EEEE')));
        END;
    ELSE
        v_text := prme._jcs_double(value::float8);
    END IF;
    -- The canonical text must denote the number itself (rules 1 and 2 hold by
    -- construction): a decimal between two doubles would share its hash with the
    -- double's own digits.
    IF v_text::numeric <> value THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'a JSON number has no exact IEEE 754 double form',
            DETAIL = format('%s would be hashed as %s; send the number as a string to keep every digit',
                left(value::text, 40), v_text);
    END IF;
    RETURN v_text;
END;
$$;

COMMENT ON FUNCTION prme._jcs_number(numeric) IS
'Internal: a JSON number in RFC 8785 form (the ECMAScript text of the nearest double); PR422 when it is out of '
'double range or that text does not denote the number exactly.';

CREATE FUNCTION prme._json_too_deep(value jsonb)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    -- The value itself is level 1 and each object or array inside it one more
    -- ({"a": [1]} is 2 deep): deeper than 32 means an object or array at path
    -- level 32 (jsonpath counts the value itself as level 0). Iterative in C;
    -- prme.submit_operation writes the same test inline.
    SELECT jsonb_path_exists(value, 'strict $.**{32} ? (@.type() == "object" || @.type() == "array")');
$$;

COMMENT ON FUNCTION prme._json_too_deep(jsonb) IS
'Internal: whether a JSON value nests deeper than 32 levels (the value is level 1; prme.ledger_limits()).';

CREATE OR REPLACE FUNCTION prme.canonical_json(value jsonb)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'value must not be null';
    END IF;
    -- The same bound as a ledger payload's: canonicalising is linear work in PL/pgSQL.
    IF pg_column_size(value) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'value must be at most 1 MiB';
    END IF;
    IF prme._json_too_deep(value) THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'value must nest at most 32 levels deep';
    END IF;
    RETURN prme._jcs(value);
END;
$$;

COMMENT ON FUNCTION prme.canonical_json(jsonb) IS
'The RFC 8785 (JCS) canonical text of a JSON value: keys in UTF-16 order, minimal escapes, numbers as '
'ECMAScript writes doubles. PR422 for a number out of double range or without an exact double form, a value '
'over 1 MiB or one nested deeper than 32 levels.';

CREATE OR REPLACE FUNCTION prme.payload_hash(payload jsonb)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF payload IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must not be null';
    END IF;
    IF pg_column_size(payload) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must be at most 1 MiB';
    END IF;
    IF prme._json_too_deep(payload) THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must nest at most 32 levels deep';
    END IF;
    RETURN prme._sha256_hex(prme._jcs(payload));
END;
$$;

COMMENT ON FUNCTION prme.payload_hash(jsonb) IS
'sha256 (lowercase hex) of the RFC 8785 canonical UTF-8 text of payload: the payload_hash that '
'prme.submit_operation expects. PR422 for a payload over 1 MiB, nested deeper than 32 levels, or with a number '
'out of double range or without an exact double form.';

-- >>> sql/postgres/420_submit_operation.sql: a first submit stores the declared hash; a resubmit
-- compares the payload itself

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

DROP FUNCTION prme._resubmitted(prme.operations, text, uuid[], text);

CREATE FUNCTION prme._resubmitted(
    op prme.operations,
    kind text,
    dependencies uuid[],
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
    IF op.dependencies <> dependencies THEN
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

COMMENT ON FUNCTION prme._resubmitted(prme.operations, text, uuid[], text, jsonb) IS
'Internal: the answer to a submit whose operation_id is taken: the stored receipt when it is the same '
'operation (kind, dependencies, declared payload_hash, payload equal as JSON values), else PR409.';

CREATE OR REPLACE FUNCTION prme.submit_operation(
    user_id text,
    operation_id uuid,
    schema_version integer,
    kind text,
    dependencies uuid[],
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
    v_op prme.operations;
    v_dependencies uuid[] := '{}'::uuid[];
    v_missing uuid[];
BEGIN
    -- Speed matters here (docs/LEDGER.md, Performance): every PL/pgSQL expression
    -- costs a plan check in each new transaction, so the common case runs as few
    -- as possible. One test passes a valid request; only an invalid one takes the
    -- checks one by one, to say what is wrong. The bounds are prme.ledger_limits()'s;
    -- the depth test is prme._json_too_deep's, written out.
    IF submit_operation.operation_id IS NULL
       OR submit_operation.schema_version IS DISTINCT FROM 2
       OR submit_operation.kind IS NULL
       OR submit_operation.kind NOT IN (
           'add_node', 'add_event', 'reinforce', 'archive_node', 'record_outcome', 'link_correction'
       )
       OR submit_operation.payload IS NULL
       OR jsonb_typeof(submit_operation.payload) <> 'object'
       OR pg_column_size(submit_operation.payload) > 1048576
       OR jsonb_path_exists(
           submit_operation.payload, 'strict $.**{32} ? (@.type() == "object" || @.type() == "array")'
       )
       OR submit_operation.payload_hash IS NULL
       OR submit_operation.payload_hash !~ '^[0-9a-f]{64}$'
       OR array_position(submit_operation.dependencies, NULL) IS NOT NULL THEN
        IF submit_operation.operation_id IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'operation_id must not be null';
        END IF;
        IF submit_operation.schema_version IS DISTINCT FROM 2 THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422',
                MESSAGE = 'schema_version must be 2',
                DETAIL = format('got %s', coalesce(submit_operation.schema_version::text, 'NULL'));
        END IF;
        IF submit_operation.kind IS NULL OR submit_operation.kind NOT IN (
            'add_node', 'add_event', 'reinforce', 'archive_node', 'record_outcome', 'link_correction'
        ) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422',
                MESSAGE = 'kind must be add_node, add_event, reinforce, archive_node, record_outcome or link_correction',
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
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'dependencies must not contain null';
    END IF;
    -- A set: sorted, duplicates dropped.
    IF cardinality(submit_operation.dependencies) > 0 THEN
        v_dependencies := ARRAY(SELECT DISTINCT d FROM unnest(submit_operation.dependencies) AS d ORDER BY d);
        IF cardinality(v_dependencies) > 100 THEN
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'an operation may have at most 100 dependencies';
        END IF;
        -- Not yet submitted when it names itself: "not found" like any other
        -- dependency this owner has not submitted before (checked after the insert).
        IF submit_operation.operation_id = ANY(v_dependencies) THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR404',
                MESSAGE = 'dependencies must be operations this owner has already submitted',
                DETAIL = format('an operation cannot depend on itself: %s', submit_operation.operation_id);
        END IF;
    END IF;

    -- A retry finds its operation and writes nothing (not even a transaction id).
    SELECT o.* INTO v_op
    FROM prme.operations AS o
    WHERE o.user_id = v_user_id AND o.operation_id = submit_operation.operation_id;
    IF FOUND THEN
        RETURN prme._resubmitted(
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
        v_user_id, submit_operation.operation_id, 2, submit_operation.kind, v_dependencies,
        submit_operation.payload_hash, submit_operation.payload, 'accepted', '{}', 0, now(), 1, now(), now(),
        prme._next_event_seq()
    )
    ON CONFLICT (user_id, operation_id) DO NOTHING
    RETURNING * INTO v_op;
    IF NOT FOUND THEN
        SELECT o.* INTO v_op
        FROM prme.operations AS o
        WHERE o.user_id = v_user_id AND o.operation_id = submit_operation.operation_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING
                ERRCODE = 'serialization_failure',
                MESSAGE = 'a concurrent submit of this operation_id is not visible to this transaction; retry';
        END IF;
        RETURN prme._resubmitted(
            v_op, submit_operation.kind, v_dependencies, submit_operation.payload_hash, submit_operation.payload
        );
    END IF;

    IF cardinality(v_dependencies) > 0 THEN
        v_missing := ARRAY(
            SELECT d FROM unnest(v_dependencies) AS d
            WHERE NOT EXISTS (
                SELECT FROM prme.operations AS o WHERE o.user_id = v_user_id AND o.operation_id = d
            )
            ORDER BY d
        );
        IF cardinality(v_missing) > 0 THEN
            -- Unknown to this owner, whether it never existed or is another owner's:
            -- "not found", as for any other id (docs/LEDGER.md).
            RAISE EXCEPTION USING
                ERRCODE = 'PR404',
                MESSAGE = 'dependencies must be operations this owner has already submitted',
                DETAIL = format('unknown: %s', array_to_string(v_missing, ', '));
        END IF;
    END IF;

    PERFORM prme._notify_ready();
    -- prme._operation_receipt(v_op, TRUE), written out: one call less on the hot path.
    RETURN ROW(
        v_op.operation_id, v_op.kind, v_op.payload_hash, v_op.dependencies, v_op.state, v_op.blocked_by,
        v_op.result, v_op.error, v_op.attempts, v_op.created_at, v_op.updated_at, TRUE
    )::prme.operation_receipt;
END;
$$;

COMMENT ON FUNCTION prme.submit_operation(text, uuid, integer, text, uuid[], text, jsonb) IS
'Durably accepts an operation of user_id for the executor. A new operation_id returns the receipt with '
'created = true; the same id with the same kind, dependencies, payload_hash and payload (equal as JSON values) '
'returns the stored receipt (created = false); the same id with anything else raises PR409. schema_version must '
'be 2; kind is add_node, add_event, reinforce, archive_node, record_outcome or link_correction; payload a JSON '
'object within prme.ledger_limits(); payload_hash 64 lowercase hex digits (PR422 otherwise); dependencies must '
'already be submitted by the same owner (PR404 otherwise, also for the operation itself). The hash is checked '
'by the executor before the operation is applied: a mismatch is rejected with reason payload_hash_mismatch.';

GRANT EXECUTE ON FUNCTION prme.ledger_limits() TO prme_app;

-- >>> sql/postgres/440_run_operations.sql: the executor checks the hash before it applies

CREATE OR REPLACE FUNCTION prme._execute_operation(
    user_id text,
    operation_id uuid,
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
    v_rejected uuid[];
    v_open uuid[];
    v_applied record;
    v_hash text;
BEGIN
    parts_used := 0;
    -- The claim holds the row lock; read the row as it is now.
    SELECT o.* INTO v_op
    FROM prme.operations AS o
    WHERE o.user_id = _execute_operation.user_id AND o.operation_id = _execute_operation.operation_id;
    IF NOT FOUND OR v_op.state NOT IN ('accepted', 'processing') THEN
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

    IF v_op.state = 'accepted' AND cardinality(v_op.dependencies) > 0 THEN
        SELECT
            coalesce(array_agg(d.operation_id ORDER BY d.operation_id) FILTER (WHERE d.state = 'rejected'), '{}'),
            coalesce(array_agg(d.operation_id ORDER BY d.operation_id) FILTER (
                WHERE d.state NOT IN ('committed', 'rejected')), '{}')
        INTO v_rejected, v_open
        FROM prme.operations AS d
        WHERE d.user_id = v_op.user_id AND d.operation_id = ANY(v_op.dependencies);
        IF cardinality(v_open) > 0 AND cardinality(v_rejected) = 0 THEN
            -- Hold the open dependencies still until this transaction ends, so none
            -- of them can commit between this look and the commit of "blocked"
            -- (its commit would look for blocked dependents before ours is visible).
            -- NOWAIT: one that is being executed right now raises 55P03, and this
            -- operation is simply tried again in a later call.
            SELECT
                coalesce(array_agg(d.operation_id ORDER BY d.operation_id) FILTER (WHERE d.state = 'rejected'), '{}'),
                coalesce(array_agg(d.operation_id ORDER BY d.operation_id) FILTER (
                    WHERE d.state NOT IN ('committed', 'rejected')), '{}')
            INTO v_rejected, v_open
            FROM (
                SELECT o.operation_id, o.state FROM prme.operations AS o
                WHERE o.user_id = v_op.user_id AND o.operation_id = ANY(v_open)
                ORDER BY o.operation_id
                FOR SHARE NOWAIT
            ) AS d;
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
        IF cardinality(v_rejected) > 0 THEN
            v_op.worker := _execute_operation.worker;
            PERFORM prme._reject_operation(v_op, jsonb_build_object(
                'reason', 'dependency_rejected',
                'dependency', v_rejected[1],
                'message', format('dependency %s was rejected', v_rejected[1])
            ));
            outcome := 'rejected';
            RETURN;
        END IF;
        IF cardinality(v_open) > 0 THEN
            UPDATE prme.operations AS o SET
                state = 'blocked',
                blocked_by = v_open,
                last_event_seq = o.last_event_seq + 1,
                updated_at = now()
            WHERE o.user_id = v_op.user_id AND o.operation_id = v_op.operation_id
            RETURNING o.* INTO v_op;
            PERFORM prme._append_operation_event(v_op, jsonb_build_object('blocked_by', v_open));
            outcome := 'blocked';
            RETURN;
        END IF;
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

COMMENT ON FUNCTION prme._execute_operation(text, uuid, text, integer) IS
'Internal: one step of one claimed operation: on the first look check its payload_hash (reject a mismatch), '
'check its dependencies (block, reject or go on), apply it, and record the outcome (committed, blocked, '
'rejected, progress or skipped).';
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (12, 'ledger_fast_submit', 'ff132017a62d95acdc29aee5fc3779d53d070e7f8b5b5166dc5b60c2549f446f');

-- prme-pg migration 0006_ledger_outcomes_and_faster_submit: the operations ledger gains the kinds
-- record_outcome and link_correction; an unknown dependency is PR404 (not found), not PR422; a cheaper
-- submit (docs/LEDGER.md).
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0006_ledger_outcomes_and_faster_submit.sql
-- (or prme-pg migrate). Its body is the changed functions of sql/postgres/4*.sql as released.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/400_jcs.sql: numbers written inline in the common case

CREATE OR REPLACE FUNCTION prme._jcs(value jsonb)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    CASE jsonb_typeof(value)
        WHEN 'object' THEN
            RETURN '{' || coalesce((
                SELECT string_agg(
                    to_json(e.key)::text || ':' || CASE jsonb_typeof(e.value)
                        WHEN 'number' THEN CASE
                            -- The common case inline (no call): see the array branch.
                            WHEN e.value::text ~ '^-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?$'
                                AND length(translate(e.value::text, '-.', '')) <= 15
                                AND e.value::text !~ '^-?0\.00000' THEN e.value::text
                            ELSE prme._jcs_number(e.value::numeric)
                        END
                        WHEN 'object' THEN prme._jcs(e.value)
                        WHEN 'array' THEN prme._jcs(e.value)
                        ELSE e.value::text
                    END,
                    ',' ORDER BY CASE
                        WHEN e.key ~ '[\uE000-\U0010FFFF]' THEN prme._jcs_key_order(e.key) ELSE e.key
                    END COLLATE "C"
                )
                FROM jsonb_each(value) AS e
            ), '') || '}';
        WHEN 'array' THEN
            RETURN '[' || coalesce((
                SELECT string_agg(
                    CASE jsonb_typeof(e.value)
                        WHEN 'number' THEN CASE
                            -- The common case inline, without calling _jcs_number: at most
                            -- 15 digits, no trailing fractional zero, at least 1e-5. Such a
                            -- number is exact or round-trips through a double, so its own
                            -- text is the shortest form (rules 1 and 2 of _jcs_number).
                            WHEN e.value::text ~ '^-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?$'
                                AND length(translate(e.value::text, '-.', '')) <= 15
                                AND e.value::text !~ '^-?0\.00000' THEN e.value::text
                            ELSE prme._jcs_number(e.value::numeric)
                        END
                        WHEN 'object' THEN prme._jcs(e.value)
                        WHEN 'array' THEN prme._jcs(e.value)
                        ELSE e.value::text
                    END,
                    ',' ORDER BY e.position
                )
                FROM jsonb_array_elements(value) WITH ORDINALITY AS e (value, position)
            ), '') || ']';
        WHEN 'number' THEN
            RETURN prme._jcs_number(value::numeric);
        ELSE
            -- Strings: jsonb's output escapes exactly as RFC 8785 does. true, false, null.
            RETURN value::text;
    END CASE;
END;
$$;

COMMENT ON FUNCTION prme._jcs(jsonb) IS
'Internal: the RFC 8785 canonical text of a JSON value (see prme.canonical_json).';

-- >>> sql/postgres/410_operations.sql: the accepted event in the operation row; event positions without a lookup

-- The accepted event moves into the operation row. Existing operations keep theirs in
-- prme.operation_events (accepted_seq NULL). A nullable column without a default is
-- added without a rewrite; its CHECK reads the table once, under the ALTER's lock.
ALTER TABLE prme.operations ADD COLUMN accepted_seq bigint CHECK (accepted_seq > 0);

COMMENT ON COLUMN prme.operations.accepted_seq IS
'Stream position (seq) of the operation''s first event, accepted (operation_seq 1, detail {}), which lives in '
'this row rather than in prme.operation_events. NULL for operations accepted before migration 0006.';

-- The accepted events in stream order (prme.operation_events merges them with
-- the table's events); unique like the table's key (user_id, seq).
CREATE UNIQUE INDEX operations_accepted ON prme.operations (user_id, accepted_seq)
WHERE accepted_seq IS NOT NULL;

-- Event positions are now counted per transaction without a lookup (no owner argument).
DROP FUNCTION prme._next_event_seq(text);

CREATE FUNCTION prme._next_event_seq()
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_xid bigint := pg_current_xact_id()::text::bigint;
    v_counter text := current_setting('prme.event_seq_counter', TRUE);
    v_n integer;
BEGIN
    -- n counts this transaction's events in a transaction-local setting "xid:n"
    -- (no lookup, no row): set_config(..., TRUE) ends with the transaction and is
    -- undone with a rolled-back subtransaction, whose events are undone too.
    -- Anything else found there (another transaction's value, garbage) starts at 0;
    -- a session that forges it only makes its own inserts collide on the unique keys.
    v_n := CASE
        WHEN v_counter ~ '^[0-9]{1,19}:[0-9]{1,7}$' AND split_part(v_counter, ':', 1)::bigint = v_xid
            THEN split_part(v_counter, ':', 2)::integer + 1
        ELSE 0
    END;
    IF v_xid >= 8796093022208 OR v_n >= 1048576 THEN
        -- 2^43 transactions is decades of continuous work; refuse rather than wrap.
        IF v_xid >= 8796093022208 THEN
            RAISE EXCEPTION 'transaction id % is beyond the range of operation event positions', v_xid;
        END IF;
        RAISE EXCEPTION 'more than 1048576 operation events in one transaction';
    END IF;
    -- set_config returns the value it set: n, read back (an assignment, not a
    -- PERFORM, is the cheaper statement on this hot path).
    RETURN (v_xid << 20)
        + split_part(set_config('prme.event_seq_counter', v_xid::text || ':' || v_n::text, TRUE), ':', 2)::integer;
END;
$$;

COMMENT ON FUNCTION prme._next_event_seq() IS
'Internal: the next stream position for an operation event in this transaction: '
'(top-level transaction id << 20) + n, n counted in the transaction-local setting prme.event_seq_counter.';

CREATE OR REPLACE FUNCTION prme._append_operation_event(op prme.operations, detail jsonb)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The caller has just written op (holding its row lock) with the new state
    -- and last_event_seq already incremented: this event is number last_event_seq.
    INSERT INTO prme.operation_events (user_id, seq, operation_id, operation_seq, state, detail, created_at)
    VALUES (
        op.user_id, prme._next_event_seq(), op.operation_id, op.last_event_seq, op.state,
        coalesce(detail, '{}'), op.updated_at
    );
    -- The executor's notifications: identical ones of one transaction are
    -- delivered once, so a batch notifies once or twice, whatever its size.
    PERFORM pg_notify('prme_operations', CASE WHEN op.state = 'accepted' THEN 'ready' ELSE 'events' END);
END;
$$;

COMMENT ON FUNCTION prme._append_operation_event(prme.operations, jsonb) IS
'Internal: appends the event for the state op is now in and notifies channel prme_operations '
'(payload ready for claimable work, events otherwise).';

CREATE OR REPLACE FUNCTION prme._notify_ready()
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- One statement (it runs on every submit): read the clock and, when the
    -- interval has passed, move it and notify. An interval of 0 notifies every
    -- time; a clock that went backwards notifies too, rather than going quiet.
    PERFORM
        CASE WHEN t.interval_ms > 0 THEN setval('prme.operation_notify_clock', t.now_ms) END,
        pg_notify('prme_operations', 'ready')
    FROM (
        SELECT
            (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms,
            CASE WHEN s.setting ~ '^[0-9]{1,9}$' THEN s.setting::integer ELSE 50 END AS interval_ms
        FROM (SELECT current_setting('prme.notify_interval_ms', TRUE) AS setting) AS s
    ) AS t
    CROSS JOIN prme.operation_notify_clock AS c
    WHERE t.interval_ms = 0 OR t.now_ms - c.last_value >= t.interval_ms OR t.now_ms < c.last_value;
END;
$$;

COMMENT ON FUNCTION prme._notify_ready() IS
'Internal: NOTIFY prme_operations, ''ready'' unless one was sent less than prme.notify_interval_ms '
'milliseconds ago (default 50; 0 notifies every time).';

-- >>> sql/postgres/420_submit_operation.sql: one row per submit; the new kinds; PR404 for an unknown dependency

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
    v_hash text;
    v_missing uuid[];
BEGIN
    -- Speed matters here (docs/LEDGER.md, Performance): every PL/pgSQL expression
    -- costs a plan check in each new transaction, so the common case runs as few
    -- as possible. One test passes a valid request; only an invalid one takes the
    -- checks one by one, to say what is wrong.
    IF submit_operation.operation_id IS NULL
       OR submit_operation.schema_version IS DISTINCT FROM 2
       OR submit_operation.kind IS NULL
       OR submit_operation.kind NOT IN (
           'add_node', 'add_event', 'reinforce', 'archive_node', 'record_outcome', 'link_correction'
       )
       OR submit_operation.payload IS NULL
       OR jsonb_typeof(submit_operation.payload) <> 'object'
       OR pg_column_size(submit_operation.payload) > 1048576
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
    v_hash := encode(sha256(convert_to(prme._jcs(submit_operation.payload), 'UTF8')), 'hex');
    IF v_hash IS DISTINCT FROM submit_operation.payload_hash THEN
        IF submit_operation.payload_hash IS NULL OR submit_operation.payload_hash !~ '^[0-9a-f]{64}$' THEN
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload_hash must be 64 lowercase hex digits';
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'payload_hash does not match the payload',
            DETAIL = format('sha256 of the payload''s RFC 8785 form is %s', v_hash);
    END IF;

    -- A retry finds its operation and writes nothing (not even a transaction id).
    SELECT o.* INTO v_op
    FROM prme.operations AS o
    WHERE o.user_id = v_user_id AND o.operation_id = submit_operation.operation_id;
    IF FOUND THEN
        RETURN prme._resubmitted(v_op, submit_operation.kind, v_dependencies, v_hash);
    END IF;
    -- A new operation: the row carries its accepted event (accepted_seq, see
    -- 410_operations.sql). A concurrent first submit of the same id is waited for
    -- in the primary key, then found.
    INSERT INTO prme.operations (
        user_id, operation_id, schema_version, kind, dependencies, payload_hash, payload, state, blocked_by,
        attempts, next_attempt_at, last_event_seq, created_at, updated_at, accepted_seq
    ) VALUES (
        v_user_id, submit_operation.operation_id, 2, submit_operation.kind, v_dependencies, v_hash,
        submit_operation.payload, 'accepted', '{}', 0, now(), 1, now(), now(), prme._next_event_seq()
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
        RETURN prme._resubmitted(v_op, submit_operation.kind, v_dependencies, v_hash);
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
'created = true; the same id with the same kind, dependencies and payload_hash returns the stored receipt '
'(created = false); the same id with anything else raises PR409. schema_version must be 2; kind is add_node, '
'add_event, reinforce, archive_node, record_outcome or link_correction; payload_hash must be the sha256 hex of '
'the payload''s RFC 8785 form (PR422 otherwise); dependencies must already be submitted by the same owner '
'(PR404 otherwise, also for the operation itself).';

-- >>> sql/postgres/430_operation_events.sql: the accepted events read from the operation rows

CREATE OR REPLACE FUNCTION prme.operation_events(
    user_id text,
    after_seq bigint DEFAULT 0,
    operation_id uuid DEFAULT NULL,
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
    v_horizon bigint;
BEGIN
    IF operation_events.max_count IS NULL OR operation_events.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    IF operation_events.after_seq IS NULL OR operation_events.after_seq < 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'after_seq must be a non-negative integer';
    END IF;
    IF operation_events.operation_id IS NOT NULL THEN
        PERFORM FROM prme.operations AS o
        WHERE o.user_id = v_user_id AND o.operation_id = operation_events.operation_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'operation not found';
        END IF;
    END IF;
    -- A STABLE function reads with its caller's snapshot: the xmin below and the
    -- rows read belong to the same snapshot.
    v_horizon := pg_snapshot_xmin(pg_current_snapshot())::text::bigint << 20;

    -- Two sources, one stream: the rows of prme.operation_events, and the accepted
    -- events kept in the operation rows (accepted_seq, 410_operations.sql). Each
    -- side is an index range scan in seq order; the union is merged, then cut.
    IF operation_events.operation_id IS NULL THEN
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
            WHERE e.user_id = v_user_id AND e.operation_id = operation_events.operation_id
              AND e.seq > operation_events.after_seq AND e.seq < v_horizon
            UNION ALL
            SELECT o.accepted_seq, o.operation_id, 1, 'accepted', '{}'::jsonb, o.created_at
            FROM prme.operations AS o
            WHERE o.user_id = v_user_id AND o.operation_id = operation_events.operation_id
              AND o.accepted_seq > operation_events.after_seq AND o.accepted_seq < v_horizon
        ) AS s
        ORDER BY s.seq
        LIMIT operation_events.max_count;
    END IF;
END;
$$;

COMMENT ON FUNCTION prme.operation_events(text, bigint, uuid, integer) IS
'Events of user_id''s operations (or of one operation) with seq > after_seq, in seq order, at most max_count. '
'Pass the last seq seen to resume: no event is skipped or repeated, even one whose transaction commits late, '
'because only events of transactions older than every running one are shown. PR404 for an unknown operation_id.';

-- >>> sql/postgres/440_run_operations.sql: record_outcome and link_correction

CREATE FUNCTION prme._payload_uuids(payload jsonb, field text)
RETURNS uuid[]
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(jsonb_typeof(payload -> field), 'null') = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(payload -> field) <> 'array' OR EXISTS (
        SELECT FROM jsonb_array_elements(payload -> field) AS e (element)
        WHERE jsonb_typeof(e.element) <> 'string'
           OR e.element #>> '{}' !~ '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$'
    ) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('payload field %s must be an array of UUIDs (8-4-4-4-12 hex digits)', field);
    END IF;
    RETURN ARRAY(
        SELECT e.element::uuid
        FROM jsonb_array_elements_text(payload -> field) WITH ORDINALITY AS e (element, position)
        ORDER BY e.position
    );
END;
$$;

COMMENT ON FUNCTION prme._payload_uuids(jsonb, text) IS
'Internal: an array-of-UUIDs field of a payload, in order (NULL when absent or null); PR422 unless it is an '
'array whose elements are all 8-4-4-4-12 hex digit strings.';

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
BEGIN
    parts_used := 0;
    CASE op.kind
        WHEN 'add_node' THEN
            PERFORM prme._payload_fields(v_payload, op.kind, ARRAY[
                'content', 'scope', 'namespace', 'kind', 'confidence_base', 'salience_base', 'stability',
                'decay_profile', 'next_review_at', 'token_budget'
            ], ARRAY['content']);
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
                request_id => op.operation_id
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
                request_id => op.operation_id
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
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (6, 'ledger_outcomes_and_faster_submit', '775cce7c7d0a628be25d0fb82c77a056403379c72c6e07b4eae706014302ccc0');

-- =============================================================================
-- prme-pg: run_operations (the executor)
--
-- One call is one transaction: it claims up to max_count claimable operations
-- (FOR UPDATE SKIP LOCKED, so executors run side by side without waiting for
-- each other) and applies each through the public API functions, in the same
-- transaction that marks it committed. An operation therefore takes effect
-- exactly once: if the call dies, neither the effect nor the mark survives.
-- Each operation runs in its own subtransaction, so one failure does not undo
-- the rest of the batch. Before anything else, the first look at an operation
-- recomputes its payload_hash (prme.submit_operation stored the client's
-- declared hash unchecked, docs/LEDGER.md "What a 202 proves"):
--   declared hash is not the payload's    -> rejected, reason payload_hash_mismatch
--   payload cannot be canonicalised       -> rejected, reason invalid_payload
--   (a number out of double range or without an exact double form)
-- and then:
--   invalid payload (PR422, data errors)  -> rejected, reason invalid_payload
--   PR404                                 -> rejected, reason not_found
--   PR409                                 -> rejected, reason conflict
--   lock contention (40001, 40P01, 55P03) -> left as it was, claimed again later
--   anything else                         -> retried with backoff (1 s, 2 s, 4 s, ...),
--                                            rejected as attempts_exhausted on attempt 5
-- Dependencies: an operation whose dependencies have not all committed becomes
-- blocked (blocked_by sorted); the commit of its last open dependency releases
-- it, and the rejection of any dependency rejects it (dependency_rejected),
-- transitively. The dependency check locks the open dependencies FOR SHARE
-- NOWAIT, and takes a shared advisory lock on each dependency not submitted yet
-- (a commit or rejection takes it exclusively before it looks for dependents),
-- so no dependency can finish unseen between the check and the commit of
-- "blocked". A blocked operation is looked at again when its dependency wait
-- (prme._dependency_wait(), setting prme.dependency_wait_seconds) is over:
-- rejected as dependency_missing when a dependency has still not been
-- submitted, as dependency_cycle when it waits for itself, else it waits one
-- more period. Nothing stays blocked forever. An operation whose dependency
-- finished in a transaction younger than this call's is left for the next call,
-- so that in the event stream (ordered by transaction id) a dependency's outcome
-- always comes before anything that waited for it.
-- Ids: add_node, add_memory and add_event create prme.derived_id(operation_id);
-- reinforce and record_outcome pass prme._operation_request_id(operation_id) as
-- their request_id.
-- =============================================================================

CREATE FUNCTION prme._payload_fields(payload jsonb, kind text, allowed text[], required text[])
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_unknown text[];
    v_missing text[];
BEGIN
    v_unknown := ARRAY(SELECT k FROM jsonb_object_keys(payload) AS k WHERE k <> ALL(allowed) ORDER BY k);
    IF cardinality(v_unknown) > 0 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('unknown payload field for %s: %s', kind, array_to_string(v_unknown, ', ')),
            DETAIL = format('allowed: %s', array_to_string(allowed, ', '));
    END IF;
    v_missing := ARRAY(
        SELECT k FROM unnest(required) AS k
        WHERE coalesce(jsonb_typeof(payload -> k), 'null') = 'null'
        ORDER BY k
    );
    IF cardinality(v_missing) > 0 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('missing payload field for %s: %s', kind, array_to_string(v_missing, ', '));
    END IF;
END;
$$;

COMMENT ON FUNCTION prme._payload_fields(jsonb, text, text[], text[]) IS
'Internal: PR422 unless payload has only allowed fields and every required one (not null).';

CREATE FUNCTION prme._payload_text(payload jsonb, field text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(jsonb_typeof(payload -> field), 'null') NOT IN ('string', 'null') THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = format('payload field %s must be a string', field);
    END IF;
    RETURN payload ->> field;
END;
$$;

COMMENT ON FUNCTION prme._payload_text(jsonb, text) IS
'Internal: a string field of a payload (NULL when absent or null); PR422 for any other JSON type.';

CREATE FUNCTION prme._payload_number(payload jsonb, field text)
RETURNS numeric
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(jsonb_typeof(payload -> field), 'null') NOT IN ('number', 'null') THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = format('payload field %s must be a number', field);
    END IF;
    RETURN (payload -> field)::numeric;
END;
$$;

COMMENT ON FUNCTION prme._payload_number(jsonb, text) IS
'Internal: a number field of a payload as an exact numeric (NULL when absent or null); PR422 otherwise.';

CREATE FUNCTION prme._payload_uuid(payload jsonb, field text)
RETURNS uuid
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text text := prme._payload_text(payload, field);
BEGIN
    IF v_text IS NOT NULL
       AND v_text !~ '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('payload field %s must be a UUID (8-4-4-4-12 hex digits)', field);
    END IF;
    RETURN v_text::uuid;
END;
$$;

COMMENT ON FUNCTION prme._payload_uuid(jsonb, text) IS
'Internal: a UUID field of a payload (NULL when absent or null); PR422 unless it is 8-4-4-4-12 hex digits.';

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

CREATE FUNCTION prme._payload_time(payload jsonb, field text)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text text := prme._payload_text(payload, field);
BEGIN
    -- An explicit offset is required: the session's TimeZone must not change the meaning.
    IF v_text IS NOT NULL AND v_text !~ (
        E'^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\\.[0-9]{1,6})?)?'
        || '(Z|z|[+-][0-9]{2}(:?[0-9]{2})?)$'
    ) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('payload field %s must be an ISO 8601 time with a UTC offset', field);
    END IF;
    RETURN v_text::timestamptz;
END;
$$;

COMMENT ON FUNCTION prme._payload_time(jsonb, text) IS
'Internal: an ISO 8601 time field (with Z or an offset) of a payload; NULL when absent; PR422 otherwise.';

CREATE FUNCTION prme._operation_request_id(operation_id text)
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

CREATE FUNCTION prme._operation_lock_key(user_id text, operation_id text)
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

CREATE FUNCTION prme._dependency_wait()
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

CREATE FUNCTION prme._apply_operation(
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
    v_embedding real[];
    v_embedding_model text;
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
                v_embedding := v_step.embedding;
                v_embedding_model := v_step.embedding_model;
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
                node_id => prme.derived_id(op.operation_id),
                embedding => v_embedding,
                embedding_model => v_embedding_model
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
'memory still has parts to validate (parts_used: validated by this call; progress: parts and parts_validated). A '
'long memory whose parts all have vectors by one model is created with their pooled vector.';

CREATE FUNCTION prme._release_dependents(op prme.operations)
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

CREATE FUNCTION prme._reject_operation(op prme.operations, error jsonb)
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

CREATE FUNCTION prme._execute_operation(
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
    -- A long memory in progress whose next parts still wait for their vectors: nothing
    -- to do until the worker has embedded them (450_long_memories.sql).
    IF v_op.state = 'processing' AND prme._parts_await_embedding(v_op) THEN
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
'and record the outcome (committed, blocked, rejected, progress or skipped; skipped, writing nothing, also for a '
'long memory whose next parts await their vectors).';

CREATE FUNCTION prme._operation_failed(
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

CREATE FUNCTION prme.run_operations(
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

CREATE FUNCTION prme.ledger_status()
RETURNS TABLE (
    accepting boolean,
    ready bigint,
    blocked bigint,
    processing bigint,
    oldest_ready_at timestamptz,
    oldest_ready_age interval
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Each count reads one partial index, never the whole ledger.
    RETURN QUERY
    SELECT
        NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off',
        q.ready,
        (SELECT count(*) FROM prme.operations AS b WHERE b.state = 'blocked'),
        q.processing,
        q.oldest,
        now() - q.oldest
    FROM (
        SELECT
            count(*) FILTER (WHERE o.state = 'accepted') AS ready,
            count(*) FILTER (WHERE o.state = 'processing') AS processing,
            min(o.created_at) AS oldest
        FROM prme.operations AS o
        WHERE o.state IN ('accepted', 'processing')
    ) AS q;
END;
$$;

COMMENT ON FUNCTION prme.ledger_status() IS
'Readiness of the ledger across owners: whether this server accepts submits (not a read-only standby), '
'the executor''s backlog (accepted, blocked, processing) and the age of the oldest unfinished claimable operation.';

REVOKE ALL ON FUNCTION prme.run_operations(integer, text, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.run_operations(integer, text, integer) TO prme_app;
REVOKE ALL ON FUNCTION prme.ledger_status() FROM public;
GRANT EXECUTE ON FUNCTION prme.ledger_status() TO prme_app;

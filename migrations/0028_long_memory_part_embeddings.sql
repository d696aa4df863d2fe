-- prme-pg migration 0028_long_memory_part_embeddings: each part of a long memory carries its
-- embedding state (issue 31, item 5).
--
-- prme.operation_parts gains embedding_state (pending, embedded, failed), embedding_model,
-- embedding (real[]), embedding_error and embedded_at; existing parts are pending. New
-- prme.pending_part_embeddings(max_count) and prme.store_part_embeddings(...) let
-- `prme-pg worker` embed the parts of the long memories in progress before it validates
-- them (its session sets prme.part_embedding_model; an executor without it validates as
-- before); a partial index on prme.operations (state processing: long memories between
-- executor calls; a submit writes no entry) finds them. prme._long_memory_step returns the
-- normalised mean of the parts' vectors when every part has one by the same model, which
-- prme._apply_operation stores as the memory's vector; prme._execute_operation skips,
-- writing nothing, a long memory whose next parts all await their vectors
-- (prme._parts_await_embedding). prme.operation_parts(user_id,
-- operation_id) also returns the embedding state. prme.store_embeddings and
-- store_part_embeddings check a batch of vectors with one helper,
-- prme._embedding_batch_dimensions (the same errors; a NULL embeddings array for a
-- non-empty batch is now PR422 too). Operations planned before the upgrade go on where
-- they were (their parts are pending). See docs/LEDGER.md ("Long memories") and
-- docs/RECALL.md ("Long memories").
--
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0028_long_memory_part_embeddings.sql
-- (or prme-pg migrate). Adding the columns rewrites nothing (constant default); their checks
-- read prme.operation_parts once under its ACCESS EXCLUSIVE lock, and the index reads
-- prme.operations once under a SHARE lock (the executor and submits wait for them).
-- Function bodies are copied from sql/postgres/305_embeddings.sql,
-- 440_run_operations.sql and 450_long_memories.sql.

SET LOCAL ROLE prme_owner;

ALTER TABLE prme.operation_parts
ADD COLUMN embedding_state text NOT NULL DEFAULT 'pending'
CONSTRAINT operation_parts_embedding_state_check CHECK (embedding_state IN ('pending', 'embedded', 'failed')),
ADD COLUMN embedding_model text,
ADD COLUMN embedding real[],
ADD COLUMN embedding_error text
CONSTRAINT operation_parts_embedding_error_check CHECK (octet_length(embedding_error) <= 2000),
ADD COLUMN embedded_at timestamptz,
ADD CONSTRAINT operation_parts_embedding_settled CHECK (
    (embedding_state = 'pending') = (embedding_model IS NULL)
    AND (embedding_state = 'pending') = (embedded_at IS NULL)
    AND (embedding_state = 'embedded') = (embedding IS NOT NULL)
    AND (embedding_state = 'failed') = (embedding_error IS NOT NULL)
);

COMMENT ON TABLE prme.operation_parts IS
'The plan of a long add_node operation: one row per part with its token and character ranges (half-open, '
'0-based), the sha256 of its text, whether it is validated, and its embedding (pending, embedded with the '
'model''s vector, or failed with the error). Kept after the memory is committed.';

CREATE INDEX operations_processing ON prme.operations (next_attempt_at)
WHERE state = 'processing';

-- Their results change: dropped and created again (granted again below).
DROP FUNCTION prme._long_memory_step(prme.operations, text, integer, integer);
DROP FUNCTION prme.operation_parts(text, text);

-- >>> sql/postgres/305_embeddings.sql

CREATE FUNCTION prme._embedding_batch_dimensions(
    model_id text,
    item_count integer,
    embeddings real[],
    errors text[],
    item text
)
RETURNS integer
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_dimensions integer;
BEGIN
    SELECT m.dimensions INTO v_dimensions
    FROM prme.embedding_models AS m
    WHERE m.user_id = '*' AND m.model_id = _embedding_batch_dimensions.model_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('unknown embedding model %s', quote_literal(left(model_id, 200))),
            HINT = 'register it first with prme.register_embedding_model(model_id, dimensions)';
    END IF;
    IF item_count = 0 THEN
        RETURN v_dimensions;
    END IF;
    IF errors IS NOT NULL AND cardinality(errors) <> item_count THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = format('errors must have one entry per %s', item);
    END IF;
    -- embeddings holds the vectors one after another, the model's dimensions each (a
    -- flat array: a row is a slice of it, read without copying the rest).
    IF array_ndims(embeddings) IS DISTINCT FROM 1 OR cardinality(embeddings) <> item_count * v_dimensions THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('embeddings must hold %s vectors of %s numbers, one after another', item_count, v_dimensions),
            DETAIL = format('got %s numbers', coalesce(cardinality(embeddings), 0));
    END IF;
    -- Containment and array_position instead of unnest: four times faster over a batch's
    -- 256,000 numbers (bench/proposals/05_store_embeddings_check.sql); NaN equals NaN here.
    IF embeddings @> ARRAY['NaN'::real]
       OR embeddings @> ARRAY['Infinity'::real]
       OR embeddings @> ARRAY['-Infinity'::real]
       OR array_position(embeddings, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'embeddings must hold finite numbers (no NULL, NaN or infinity)';
    END IF;
    RETURN v_dimensions;
END;
$$;

COMMENT ON FUNCTION prme._embedding_batch_dimensions(text, integer, real[], text[], text) IS
'Internal: the dimensions of model_id when embeddings holds item_count of its vectors one after another, all '
'finite, and errors (if given) one entry per item; PR422 otherwise, naming item. For the batch writers of vectors.';

CREATE OR REPLACE FUNCTION prme.store_embeddings(
    model_id text,
    user_ids text[],
    node_ids uuid[],
    embeddings real[],
    errors text[] DEFAULT NULL
)
RETURNS TABLE (stored integer)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count integer := coalesce(cardinality(store_embeddings.node_ids), 0);
    v_dimensions integer;
    v_stored integer;
BEGIN
    IF v_count > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'at most 10000 embeddings per call';
    END IF;
    IF coalesce(cardinality(store_embeddings.user_ids), 0) <> v_count THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'user_ids and node_ids must have the same length';
    END IF;
    v_dimensions := prme._embedding_batch_dimensions(
        store_embeddings.model_id, v_count, store_embeddings.embeddings, store_embeddings.errors, 'node_id'
    );
    IF v_count = 0 THEN
        RETURN QUERY SELECT 0;
        RETURN;
    END IF;

    -- A vector replaces a recorded failure; an existing vector is kept (the content it
    -- was computed from never changes). A memory that is missing, or another owner's,
    -- is skipped: nothing to attach the vector to.
    INSERT INTO prme.node_embeddings AS e (user_id, node_id, model_id, embedding, error)
    SELECT i.user_id, i.node_id, store_embeddings.model_id,
        CASE WHEN i.error IS NULL
            THEN store_embeddings.embeddings[(i.ord - 1) * v_dimensions + 1:i.ord * v_dimensions]
        END,
        left(i.error, 2000)
    FROM unnest(store_embeddings.user_ids, store_embeddings.node_ids, store_embeddings.errors)
        WITH ORDINALITY AS i (user_id, node_id, error, ord)
    WHERE EXISTS (SELECT FROM prme.nodes AS n WHERE n.user_id = i.user_id AND n.id = i.node_id)
    ON CONFLICT (user_id, model_id, node_id) DO UPDATE
    SET embedding = excluded.embedding, error = excluded.error, embedded_at = excluded.embedded_at
    WHERE e.embedding IS NULL;
    GET DIAGNOSTICS v_stored = ROW_COUNT;
    RETURN QUERY SELECT v_stored;
END;
$$;

COMMENT ON FUNCTION prme.store_embeddings(text, text[], uuid[], real[], text[]) IS
'Stores a batch of embeddings by model_id (embeddings: the vectors one after another, the model''s dimensions each), '
'or per node the error of a failed attempt (errors[i] not NULL; its vector is then ignored). Keeps a vector already '
'stored; skips missing memories. Returns the rows written (a set of one row: the PL/Proxy tier sends a batch to '
'every shard, each stores its own owners'' memories). For the embedding worker.';

-- >>> sql/postgres/440_run_operations.sql

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

-- >>> sql/postgres/450_long_memories.sql

CREATE FUNCTION prme._parts_await_embedding(op prme.operations)
RETURNS boolean
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF nullif(current_setting('prme.part_embedding_model', TRUE), '') IS NULL THEN
        RETURN FALSE;
    END IF;
    RETURN coalesce((
        SELECT bool_and(p.embedding_state = 'pending')
        FROM prme.operation_parts AS p
        WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id AND p.state = 'planned'
    ), FALSE);
END;
$$;

COMMENT ON FUNCTION prme._parts_await_embedding(prme.operations) IS
'Internal: true when this session''s executor embeds parts (setting prme.part_embedding_model) and every part of op '
'still to validate awaits its vector: a step would change nothing, so the executor skips op.';

CREATE FUNCTION prme._long_memory_step(
    op prme.operations,
    content text,
    token_budget integer,
    parts_budget integer,
    OUT complete boolean,
    OUT content_out text,
    OUT parts integer,
    OUT parts_done integer,
    OUT parts_validated integer,
    OUT embedding real[],
    OUT embedding_model text
)
RETURNS record
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_part prme.operation_parts;
    v_text text;
    -- Set by an executor that embeds parts itself: validate only parts with a vector or a failure.
    v_model text := nullif(current_setting('prme.part_embedding_model', TRUE), '');
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

    -- 2. Validate the next parts, skipping those already validated (and, for an executor
    --    that embeds, those whose embedding is still pending).
    FOR v_part IN
        SELECT p.* FROM prme.operation_parts AS p
        WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id AND p.state = 'planned'
          AND (v_model IS NULL OR p.embedding_state <> 'pending')
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

    -- 3. The memory is what the validated parts assemble to; it gets a vector when every
    --    part has one by the same model (else none: the embedding worker embeds the content).
    SELECT
        string_agg(substr(content, p.char_start + 1, p.char_end - p.char_start), '' ORDER BY p.part_no),
        CASE
            WHEN count(*) FILTER (WHERE p.embedding_state = 'embedded') = count(*)
                AND count(DISTINCT p.embedding_model) = 1
                THEN min(p.embedding_model)
        END
    INTO content_out, embedding_model
    FROM prme.operation_parts AS p
    WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id AND p.state = 'validated';
    IF content_out IS DISTINCT FROM content THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'the validated parts do not assemble the content';
    END IF;

    -- 4. That vector: the normalised mean of the parts' vectors.
    IF embedding_model IS NOT NULL THEN
        WITH sums AS (
            SELECT c.i, sum(c.component::double precision) AS total
            FROM prme.operation_parts AS p
            CROSS JOIN LATERAL unnest(p.embedding) WITH ORDINALITY AS c (component, i)
            WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id
            GROUP BY c.i
        ),
        norm AS (SELECT sqrt(sum(s.total * s.total)) AS length FROM sums AS s)
        SELECT array_agg((s.total / n.length)::real ORDER BY s.i) INTO embedding
        FROM sums AS s CROSS JOIN norm AS n
        WHERE n.length > 0;
        IF embedding IS NULL THEN
            embedding_model := NULL;  -- the parts' vectors cancel out: no direction to store
        END IF;
    END IF;
END;
$$;

COMMENT ON FUNCTION prme._long_memory_step(prme.operations, text, integer, integer) IS
'Internal: one executor step of a long add_node or add_memory: plans it into parts (once), validates up to parts_budget '
'parts (with setting prme.part_embedding_model, only parts whose embedding is settled: embedded or failed), and once all are '
'validated returns the content assembled from them (complete = true) and, when every part has a vector by one model, '
'their normalised mean (embedding, embedding_model).';

CREATE FUNCTION prme.operation_parts(user_id text, operation_id text)
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
    validated_at timestamptz,
    embedding_state text,
    embedding_model text,
    embedding_error text,
    embedded_at timestamptz
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
        p.planned_at, p.validated_at, p.embedding_state, p.embedding_model, p.embedding_error, p.embedded_at
    FROM prme.operation_parts AS p
    WHERE p.user_id = v_user_id AND p.operation_id = v_id
    ORDER BY p.part_no;
END;
$$;

COMMENT ON FUNCTION prme.operation_parts(text, text) IS
'The stored plan of a long add_node or add_memory operation of user_id: its parts in order, with token and character ranges, '
'hash, state and embedding state (pending, embedded by embedding_model, or failed with embedding_error). No rows for an '
'operation that was not planned; PR404 for an unknown operation.';

CREATE FUNCTION prme.pending_part_embeddings(max_count integer DEFAULT 64)
RETURNS TABLE (user_id text, operation_id text, part_no integer, content text)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF pending_part_embeddings.max_count IS NULL OR pending_part_embeddings.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    -- The pending parts of the long memories in progress, oldest operation first.
    RETURN QUERY
    SELECT p.user_id, p.operation_id, p.part_no,
        substr(o.payload ->> 'content', p.char_start + 1, p.char_end - p.char_start)
    FROM prme.operations AS o
    INNER JOIN prme.operation_parts AS p ON p.user_id = o.user_id AND p.operation_id = o.operation_id
    WHERE o.state = 'processing' AND p.embedding_state = 'pending'
    ORDER BY o.next_attempt_at, p.user_id, p.operation_id, p.part_no
    LIMIT pending_part_embeddings.max_count;
END;
$$;

COMMENT ON FUNCTION prme.pending_part_embeddings(integer) IS
'The pending parts (no vector, no recorded failure) of the long memories in progress of every owner, at most '
'max_count, with their text: what an executor that embeds parts embeds before it validates them. For prme-pg '
'worker.';

CREATE FUNCTION prme.store_part_embeddings(
    model_id text,
    user_ids text[],
    operation_ids text[],
    part_nos integer[],
    embeddings real[],
    errors text[] DEFAULT NULL
)
RETURNS TABLE (stored integer)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_count integer := coalesce(cardinality(store_part_embeddings.part_nos), 0);
    v_dimensions integer;
    v_stored integer;
BEGIN
    IF v_count > 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'at most 10000 part embeddings per call';
    END IF;
    IF coalesce(cardinality(store_part_embeddings.user_ids), 0) <> v_count
       OR coalesce(cardinality(store_part_embeddings.operation_ids), 0) <> v_count THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'user_ids, operation_ids and part_nos must have the same length';
    END IF;
    v_dimensions := prme._embedding_batch_dimensions(
        store_part_embeddings.model_id, v_count, store_part_embeddings.embeddings, store_part_embeddings.errors, 'part'
    );
    IF v_count = 0 THEN
        RETURN QUERY SELECT 0;
        RETURN;
    END IF;

    -- Only pending parts are written: a part keeps the vector (or failure) stored first, as
    -- its text never changes; a part that is missing is skipped.
    UPDATE prme.operation_parts AS p SET
        embedding_state = CASE WHEN i.error IS NULL THEN 'embedded' ELSE 'failed' END,
        embedding_model = store_part_embeddings.model_id,
        embedding = CASE WHEN i.error IS NULL
            THEN store_part_embeddings.embeddings[(i.ord - 1) * v_dimensions + 1:i.ord * v_dimensions]
        END,
        embedding_error = left(i.error, 2000),
        embedded_at = clock_timestamp()
    FROM unnest(
        store_part_embeddings.user_ids, store_part_embeddings.operation_ids, store_part_embeddings.part_nos,
        store_part_embeddings.errors
    ) WITH ORDINALITY AS i (user_id, operation_id, part_no, error, ord)
    WHERE p.user_id = i.user_id AND p.operation_id = i.operation_id AND p.part_no = i.part_no
      AND p.embedding_state = 'pending';
    GET DIAGNOSTICS v_stored = ROW_COUNT;
    RETURN QUERY SELECT v_stored;
END;
$$;

COMMENT ON FUNCTION prme.store_part_embeddings(text, text[], text[], integer[], real[], text[]) IS
'Stores the vectors by model_id of parts of long memories (embeddings: one after another, the model''s dimensions each), '
'or per part the error of a failed attempt (errors[i] not NULL). Writes pending parts only (a part keeps what was '
'stored first); skips missing parts. A vector of the wrong size, or NULL, NaN or infinite numbers: PR422, nothing stored. Returns the parts '
'written (a set of one row, as prme.store_embeddings). For prme-pg worker.';

GRANT EXECUTE ON FUNCTION prme.operation_parts(text, text) TO prme_app;
REVOKE ALL ON FUNCTION prme.pending_part_embeddings(integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.pending_part_embeddings(integer) TO prme_app;
REVOKE ALL ON FUNCTION prme.store_part_embeddings(text, text[], text[], integer[], real[], text[]) FROM public;
GRANT EXECUTE ON FUNCTION prme.store_part_embeddings(text, text[], text[], integer[], real[], text[]) TO prme_app;
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (28, 'long_memory_part_embeddings', 'ad51cf63d050ba0dbb2cd013addff57d15cfcf3dbfa632e5fb12a43327b11693');

-- prme-pg migration 0024_bulk_add_nodes: prme.add_nodes, up to 1000 memories in one call (issue 35).
--
-- Bulk import and any client with many memories at once (a LangGraph store, a mem0 export,
-- another pack) called prme.add_node once per memory: one transaction, one round trip and
-- one commit each. prme.add_nodes(user_id, items jsonb) writes up to 1000 memories of one
-- owner in one transaction, each exactly as add_node writes it (the same validation, node
-- row and create record; the optional created_at keeps an imported memory's first date),
-- all or nothing: a bad item raises PR422 (a taken node_id PR409) whose message starts with
-- items[N], and nothing is written. An item whose node_id the owner has with the same
-- content, scope, namespace and kind is a replay: answered from the stored node, nothing
-- written, so a retried batch or a resumed import writes only what is missing. An item may
-- carry its content's vector (embedding_model, its numbers in the batch's flat embeddings
-- real[]), stored as add_node's embedding (0022) with the same checks.
-- See docs/IMPORT.md. No existing function, table or index changes.
--
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0024_bulk_add_nodes.sql
-- (or prme-pg migrate). It adds one function: catalog locks only, each held for a moment.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/085_add_nodes.sql

CREATE FUNCTION prme.add_nodes(user_id text, items jsonb, embeddings real[] DEFAULT NULL)
RETURNS SETOF prme.node_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(add_nodes.user_id);
    v_now timestamptz := now();
    v_bad integer;
    v_problem text;
    v_index integer;
    v_item record;
    v_node prme.nodes;
    v_stored prme.nodes;
    v_entry prme.journal;
    v_nodes prme.nodes[];  -- NULL: array_append starts it
    v_entries prme.journal[];
    v_results prme.node_view[];
    v_existing uuid[];
    v_cadences jsonb := '{}'::jsonb;
    v_written integer;
    v_message text;
    v_detail text;
    v_state text;
    v_dimensions jsonb := '{}'::jsonb;  -- model id -> dimensions, looked up once per batch
    v_count integer;
    v_offset integer := 0;
    v_span_items integer[];  -- every item with a vector, and where its numbers start
    v_span_offsets integer[];
    v_vector_ids uuid[];
    v_vector_models text[];
    v_vector_offsets integer[];
    v_vector_counts integer[];
    v_bad_position integer;
BEGIN
    IF items IS NULL OR jsonb_typeof(items) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'items must be a JSON array of memories';
    END IF;
    IF jsonb_array_length(items) > 1000 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'items must hold at most 1000 memories',
            DETAIL = format('got %s', jsonb_array_length(items));
    END IF;

    -- The shape of every item, before any value is read: an object with add_node's fields
    -- only, each of its JSON type or null, node_id a UUID and not repeated in the batch.
    SELECT s.n - 1, s.problem INTO v_bad, v_problem
    FROM (
        SELECT
            e.n,
            CASE
                WHEN jsonb_typeof(e.item) <> 'object' THEN 'must be a JSON object'
                WHEN e.item - ARRAY[
                    'content', 'scope', 'namespace', 'kind', 'confidence_base', 'salience_base', 'stability',
                    'decay_profile', 'next_review_at', 'node_id', 'created_at', 'embedding_model',
                    'embedding_dimensions'
                ] <> '{}'::jsonb
                    THEN format(
                        'unknown field %s', (
                            SELECT min(k.key) FROM jsonb_object_keys(
                                e.item - ARRAY[
                                    'content', 'scope', 'namespace', 'kind', 'confidence_base', 'salience_base',
                                    'stability', 'decay_profile', 'next_review_at', 'node_id', 'created_at',
                                    'embedding_model', 'embedding_dimensions'
                                ]
                            ) AS k (key)
                        )
                    )
                WHEN jsonb_typeof(e.item -> 'confidence_base') NOT IN ('number', 'null')
                    THEN 'confidence_base must be a number'
                WHEN jsonb_typeof(e.item -> 'salience_base') NOT IN ('number', 'null')
                    THEN 'salience_base must be a number'
                WHEN jsonb_typeof(e.item -> 'embedding_dimensions') NOT IN ('number', 'null')
                    THEN 'embedding_dimensions must be a number'
                WHEN EXISTS (
                    SELECT FROM jsonb_each(e.item) AS f
                    WHERE f.key NOT IN ('confidence_base', 'salience_base', 'embedding_dimensions') AND jsonb_typeof(f.value) NOT IN ('string', 'null')
                )
                    THEN (
                        SELECT format('%s must be a string', min(f.key)) FROM jsonb_each(e.item) AS f
                        WHERE f.key NOT IN ('confidence_base', 'salience_base', 'embedding_dimensions') AND jsonb_typeof(f.value) NOT IN ('string', 'null')
                    )
                WHEN e.item ->> 'node_id' !~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'
                    THEN 'node_id must be a UUID'
                WHEN count(*) OVER (PARTITION BY lower(e.item ->> 'node_id')) > 1 AND e.item ? 'node_id'
                     AND e.item ->> 'node_id' IS NOT NULL
                    THEN 'node_id repeats another item''s'
            END AS problem
        FROM jsonb_array_elements(items) WITH ORDINALITY AS e (item, n)
    ) AS s
    WHERE s.problem IS NOT NULL
    ORDER BY s.n
    LIMIT 1;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = format('items[%s]: %s', v_bad, v_problem);
    END IF;

    IF cardinality(embeddings) > 0 AND (array_ndims(embeddings) <> 1 OR array_lower(embeddings, 1) <> 1) THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'embeddings must be a one-dimensional array from 1';
    END IF;

    -- The node ids this owner has already: those items are replays (or conflicts).
    SELECT array_agg(n.id) INTO v_existing
    FROM prme.nodes AS n
    WHERE
        n.user_id = v_user_id
        AND n.id IN (
            SELECT (e.item ->> 'node_id')::uuid FROM jsonb_array_elements(items) AS e (item)
            WHERE e.item ->> 'node_id' IS NOT NULL
        );

    BEGIN
        v_index := -1;
        v_written := 0;
        FOR v_item IN
            SELECT
                x.content, x.scope, x.namespace, x.kind, x.confidence_base, x.salience_base, x.stability,
                x.decay_profile, x.next_review_at, x.node_id, x.created_at, x.embedding_model,
                x.embedding_dimensions
            FROM jsonb_to_recordset(items) AS x (  -- in the array's order
                content text, scope text, namespace text, kind text, confidence_base numeric,
                salience_base numeric, stability text, decay_profile text, next_review_at text, node_id uuid,
                created_at text, embedding_model text, embedding_dimensions integer
            )
        LOOP
            v_index := v_index + 1;
            -- add_node's rules (080_add_node.sql), a null or absent field taking its default.
            v_node := NULL;
            v_node.id := coalesce(v_item.node_id, gen_random_uuid());
            v_node.user_id := v_user_id;
            v_node.namespace := prme._valid_name('namespace', coalesce(v_item.namespace, 'default'));
            v_node.scope := prme._valid_name('scope', coalesce(v_item.scope, 'personal'));
            v_node.kind := prme._valid_name('kind', coalesce(v_item.kind, 'fact'));
            v_node.content := prme._valid_content(v_item.content);
            v_node.confidence_base := prme._valid_fraction('confidence_base', coalesce(v_item.confidence_base, 0.5));
            v_node.salience_base := prme._valid_fraction('salience_base', coalesce(v_item.salience_base, 0.5));
            v_node.reinforcement_boost := 0;
            v_node.evidence_refs := '{}';
            IF coalesce(v_item.stability, 'low') NOT IN ('low', 'semi-stable', 'stable') THEN
                RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'stability must be low, semi-stable or stable';
            END IF;
            v_node.stability := coalesce(v_item.stability, 'low');
            IF coalesce(v_item.decay_profile, 'medium') NOT IN ('permanent', 'slow', 'medium', 'fast', 'rapid') THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'PR422', MESSAGE = 'decay_profile must be permanent, slow, medium, fast or rapid';
            END IF;
            v_node.decay_profile := coalesce(v_item.decay_profile, 'medium');
            v_node.lifecycle_state := 'active';
            -- created_at: when the memory was first made elsewhere (an import), never in the future.
            v_node.created_at := coalesce(prme._valid_timestamp('created_at', v_item.created_at::timestamptz), v_now);
            IF v_node.created_at > v_now THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'PR422',
                    MESSAGE = 'created_at must not be in the future',
                    DETAIL = format('got %s', v_item.created_at);
            END IF;
            IF v_item.next_review_at = 'infinity' THEN
                v_node.next_review_at := NULL;
            ELSIF v_item.next_review_at IS NOT NULL THEN
                v_node.next_review_at := prme._valid_timestamp('next_review_at', v_item.next_review_at::timestamptz);
            ELSE
                IF NOT v_cadences ? v_node.stability THEN
                    v_cadences := v_cadences || jsonb_build_object(
                        v_node.stability,
                        (prme._maintenance_setting(v_user_id, v_node.stability)).review_cadence::text
                    );
                END IF;
                v_node.next_review_at := prme._plus_cadence(v_now, (v_cadences ->> v_node.stability)::interval);
            END IF;
            v_node.updated_at := v_now;
            v_node.version := 1;
            -- The item's vector: the next dimensions numbers of embeddings (add_node's rules,
            -- prme._valid_embedding's messages; finiteness is checked once, below).
            v_count := NULL;
            IF v_item.embedding_model IS NOT NULL THEN
                IF NOT v_dimensions ? v_item.embedding_model THEN
                    v_dimensions := v_dimensions || jsonb_build_object(
                        v_item.embedding_model, (
                            SELECT m.dimensions FROM prme.embedding_models AS m
                            WHERE m.user_id = '*' AND m.model_id = v_item.embedding_model
                        )
                    );
                END IF;
                v_count := (v_dimensions ->> v_item.embedding_model)::integer;
                IF v_count IS NULL AND v_item.embedding_dimensions IS NOT NULL THEN
                    -- A model's first vector registers it, with its dimensions (as add_node does).
                    PERFORM prme.register_embedding_model(v_item.embedding_model, v_item.embedding_dimensions);
                    v_count := v_item.embedding_dimensions;
                    v_dimensions := v_dimensions || jsonb_build_object(v_item.embedding_model, v_count);
                END IF;
                IF v_count IS NULL THEN
                    RAISE EXCEPTION USING
                        ERRCODE = 'PR422',
                        MESSAGE = format('unknown embedding model %s', quote_literal(left(v_item.embedding_model, 200))),
                        HINT = 'register it first with prme.register_embedding_model(model_id, dimensions)';
                END IF;
                -- embedding_dimensions, when given, is how many numbers the item's vector has.
                IF v_item.embedding_dimensions <> v_count THEN
                    RAISE EXCEPTION USING
                        ERRCODE = 'PR422',
                        MESSAGE = format(
                            'embedding must have %s dimensions for model %s', v_count, quote_literal(v_item.embedding_model)
                        ),
                        DETAIL = format('got %s', v_item.embedding_dimensions);
                END IF;
                IF coalesce(cardinality(embeddings), 0) < v_offset + v_count THEN
                    RAISE EXCEPTION USING
                        ERRCODE = 'PR422',
                        MESSAGE = format(
                            'embedding must have %s dimensions for model %s', v_count, quote_literal(v_item.embedding_model)
                        ),
                        DETAIL = format('embeddings holds %s more numbers', coalesce(cardinality(embeddings), 0) - v_offset);
                END IF;
            END IF;

            IF v_node.id = any(v_existing) THEN
                SELECT n.* INTO v_stored FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = v_node.id;
                IF (v_stored.content, v_stored.scope, v_stored.namespace, v_stored.kind)
                   IS DISTINCT FROM (v_node.content, v_node.scope, v_node.namespace, v_node.kind) THEN
                    RAISE EXCEPTION USING
                        ERRCODE = 'PR409',
                        MESSAGE = 'a node with this node_id already exists with other content, scope, namespace or kind',
                        DETAIL = format('node_id %s', v_node.id);
                END IF;
                v_results[v_index] := prme._node_view(v_stored, TRUE);  -- its vector too is not written
            ELSE
                v_entry := prme._journal_entry('create', NULL, gen_random_uuid(), NULL, NULL, NULL, v_node);
                v_node.last_checksum := v_entry.checksum;
                -- Element assignment changes an expanded array in place: appending would copy
                -- the whole array, records and all, once per item.
                v_written := v_written + 1;
                v_nodes[v_written] := v_node;
                v_entries[v_written] := v_entry;
                v_results[v_index] := prme._node_view(v_node, FALSE);
                IF v_count IS NOT NULL THEN
                    v_vector_ids[coalesce(cardinality(v_vector_ids), 0) + 1] := v_node.id;
                    v_vector_models[coalesce(cardinality(v_vector_models), 0) + 1] := v_item.embedding_model;
                    v_vector_offsets[coalesce(cardinality(v_vector_offsets), 0) + 1] := v_offset;
                    v_vector_counts[coalesce(cardinality(v_vector_counts), 0) + 1] := v_count;
                END IF;
            END IF;
            IF v_count IS NOT NULL THEN
                v_span_items[coalesce(cardinality(v_span_items), 0) + 1] := v_index;
                v_span_offsets[coalesce(cardinality(v_span_offsets), 0) + 1] := v_offset;
                v_offset := v_offset + v_count;
            END IF;
        END LOOP;
        -- Finite numbers only, in one pass over the batch's numbers (NaN and infinity equal
        -- themselves in PostgreSQL's float order); the first bad one names its item.
        IF embeddings IS NOT NULL THEN
            SELECT min(p.position) INTO v_bad_position
            FROM unnest(ARRAY[
                array_position(embeddings, NULL), array_position(embeddings, 'NaN'::real),
                array_position(embeddings, 'Infinity'::real), array_position(embeddings, '-Infinity'::real)
            ]) AS p (position);
            IF v_bad_position <= v_offset THEN
                v_index := (
                    SELECT v.item FROM unnest(v_span_items, v_span_offsets) AS v (item, first)
                    WHERE v.first < v_bad_position ORDER BY v.first DESC LIMIT 1
                );
                RAISE EXCEPTION USING
                    ERRCODE = 'PR422', MESSAGE = 'embedding must hold finite numbers (no NULL, NaN or infinity)';
            END IF;
        END IF;
    EXCEPTION WHEN SQLSTATE 'PR422' OR SQLSTATE 'PR409' OR data_exception THEN
        GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL, v_state = RETURNED_SQLSTATE;
        RAISE EXCEPTION USING
            ERRCODE = CASE WHEN v_state = 'PR409' THEN 'PR409' ELSE 'PR422' END,
            MESSAGE = format('items[%s]: %s', v_index, v_message),
            DETAIL = v_detail;
    END;

    IF coalesce(cardinality(embeddings), 0) <> v_offset THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'embeddings must hold exactly the numbers of the items'' vectors',
            DETAIL = format('got %s numbers, the items'' embedding models take %s', cardinality(embeddings), v_offset);
    END IF;

    -- The search vector is computed once, at creation, as add_node does.
    INSERT INTO prme.nodes (
        id, user_id, namespace, scope, kind, content, confidence_base, salience_base, reinforcement_boost,
        last_reinforced_at, evidence_refs, stability, next_review_at, lifecycle_state, decay_profile,
        created_at, updated_at, version, last_checksum, search
    )
    SELECT
        n.id, n.user_id, n.namespace, n.scope, n.kind, n.content, n.confidence_base, n.salience_base,
        n.reinforcement_boost, n.last_reinforced_at, n.evidence_refs, n.stability, n.next_review_at,
        n.lifecycle_state, n.decay_profile, n.created_at, n.updated_at, n.version, n.last_checksum,
        -- prme._owner_lexemes(user_id, content) with the owner's key computed once per batch,
        -- not once per word: the same vector (tests/test_add_nodes.py) at a quarter of the cost.
        array_to_tsvector(array(SELECT k.owner_key || '/' || w.word FROM unnest(prme._recall_words(n.content)) AS w (word)))
    FROM
        unnest(v_nodes) AS n,
        (SELECT substr(encode(sha256(convert_to(v_user_id, 'UTF8')), 'hex'), 1, 16) AS owner_key) AS k
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_written = ROW_COUNT;
    IF v_written <> coalesce(cardinality(v_nodes), 0) THEN
        -- Another call created one of these node ids after this one looked: retrying the
        -- batch answers it as a replay.
        RAISE EXCEPTION USING
            ERRCODE = 'PR409', MESSAGE = 'a concurrent call created one of these node_ids: retry the batch';
    END IF;
    INSERT INTO prme.journal SELECT e.* FROM unnest(v_entries) AS e;
    INSERT INTO prme.node_embeddings (user_id, node_id, model_id, embedding)
    SELECT v_user_id, v.id, v.model_id, embeddings[v.first + 1:v.first + v.dimensions]
    FROM unnest(v_vector_ids, v_vector_models, v_vector_offsets, v_vector_counts) AS v (id, model_id, first, dimensions);

    RETURN QUERY SELECT r.* FROM unnest(v_results) AS r;  -- in item order
END;
$$;

COMMENT ON FUNCTION prme.add_nodes(text, jsonb, real[]) IS
'Creates up to 1000 memories of user_id in one transaction, each exactly as add_node would (its create record '
'included); items is a JSON array of objects with add_node''s fields (a null or absent field takes its default; '
'next_review_at ''infinity'' means no schedule) and created_at (an earlier creation time). Returns one row per item, '
'in order; an item whose node_id exists with the same content, scope, namespace and kind is a replay (replayed, '
'nothing written). An item''s embedding_model names a registered model; its vector is the next dimensions numbers '
'of embeddings (one flat real[] for the batch; embedding_dimensions, if given, must be the model''s), stored as '
'add_node''s embedding. A bad item raises PR422 (a taken '
'node_id PR409) naming it as items[N]; nothing is written.';

REVOKE ALL ON FUNCTION prme.add_nodes(text, jsonb, real[]) FROM public;
GRANT EXECUTE ON FUNCTION prme.add_nodes(text, jsonb, real[]) TO prme_app;
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (24, 'bulk_add_nodes', 'b1edf8c6e5e7076550f0df6c0c4c98f55219571a1a5c2f71ef74b2fe26befbbd');

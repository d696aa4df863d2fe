-- prme-pg migration 0026_set_based_add_nodes: prme.add_nodes made set-based (issue 35, item 5).
--
-- add_nodes (0024) checked and built its items one by one in PL/pgSQL: about 400 us of server
-- CPU a memory here, most of it recall's words computed by a function call per memory, the
-- checking helpers called per memory (each sets its search_path), a PL/pgSQL record builder
-- per memory, and a copy of the whole embeddings array per vector sliced from it. Now one
-- statement checks the whole batch (each distinct namespace, scope and kind once) and writes
-- the nodes, their create records and their vectors, one INSERT per table: about half the
-- CPU. Results are 0024's: the same node rows, byte-identical records, the same replays, all
-- or nothing. A batch it refuses is checked again item by item, in order, by the new
-- prme._add_nodes_refusal (0024's checks), which raises the same errors naming items[N] --
-- and now names the item of an embedding_dimensions that is not an integer (0024 said
-- items[-1]). prme._first_not_finite is the finiteness check both share. See docs/IMPORT.md
-- ("Speed on PostgreSQL"). No table changes.
--
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0026_set_based_add_nodes.sql
-- (or prme-pg migrate). It replaces a function and adds two: catalog locks only, each held
-- for a moment. Its body is copied from sql/postgres/085_add_nodes.sql.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/085_add_nodes.sql

CREATE OR REPLACE FUNCTION prme._first_not_finite(numbers real[])
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
-- NaN and infinity equal themselves in PostgreSQL's float order, so each is looked for by name
-- (least() passes over the NULL of one not found). No subquery: inlined into its caller.
RETURN least(
    array_position(numbers, NULL), array_position(numbers, 'NaN'::real),
    array_position(numbers, 'Infinity'::real), array_position(numbers, '-Infinity'::real)
);

COMMENT ON FUNCTION prme._first_not_finite(real[]) IS
'Internal: the position of the first NULL, NaN or infinity in numbers, or NULL when every number is finite.';

CREATE OR REPLACE FUNCTION prme._add_nodes_refusal(user_id text, items jsonb, embeddings real[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := now();
    v_index integer := -1;
    v_item record;
    v_node prme.nodes;
    v_stored prme.nodes;
    v_dimensions jsonb := '{}'::jsonb;  -- model id -> dimensions
    v_dimensions_given integer;
    v_count integer;
    v_offset integer := 0;
    v_span_items integer[];  -- every item with a vector, and where its numbers start
    v_span_offsets integer[];
    v_bad_position integer;
    v_message text;
    v_detail text;
    v_state text;
BEGIN
    BEGIN
        FOR v_item IN
            SELECT
                x.content, x.scope, x.namespace, x.kind, x.confidence_base, x.salience_base, x.stability,
                x.decay_profile, x.next_review_at, x.node_id, x.created_at, x.embedding_model,
                x.embedding_dimensions
            FROM jsonb_to_recordset(items) AS x (  -- in the array's order
                content text, scope text, namespace text, kind text, confidence_base numeric,
                salience_base numeric, stability text, decay_profile text, next_review_at text, node_id uuid,
                -- text, cast in the loop: a cast that fails while rows are fetched would name no item
                created_at text, embedding_model text, embedding_dimensions text
            )
        LOOP
            v_index := v_index + 1;
            v_dimensions_given := v_item.embedding_dimensions::integer;
            -- add_node's rules (080_add_node.sql), a null or absent field taking its default.
            v_node := NULL;
            v_node.namespace := prme._valid_name('namespace', coalesce(v_item.namespace, 'default'));
            v_node.scope := prme._valid_name('scope', coalesce(v_item.scope, 'personal'));
            v_node.kind := prme._valid_name('kind', coalesce(v_item.kind, 'fact'));
            v_node.content := prme._valid_content(v_item.content);
            v_node.confidence_base := prme._valid_fraction('confidence_base', coalesce(v_item.confidence_base, 0.5));
            v_node.salience_base := prme._valid_fraction('salience_base', coalesce(v_item.salience_base, 0.5));
            IF coalesce(v_item.stability, 'low') NOT IN ('low', 'semi-stable', 'stable') THEN
                RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'stability must be low, semi-stable or stable';
            END IF;
            IF coalesce(v_item.decay_profile, 'medium') NOT IN ('permanent', 'slow', 'medium', 'fast', 'rapid') THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'PR422', MESSAGE = 'decay_profile must be permanent, slow, medium, fast or rapid';
            END IF;
            IF prme._valid_timestamp('created_at', v_item.created_at::timestamptz) > v_now THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'PR422',
                    MESSAGE = 'created_at must not be in the future',
                    DETAIL = format('got %s', v_item.created_at);
            END IF;
            IF v_item.next_review_at <> 'infinity' THEN
                PERFORM prme._valid_timestamp('next_review_at', v_item.next_review_at::timestamptz);
            END IF;
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
                IF v_count IS NULL AND v_dimensions_given IS NOT NULL THEN
                    -- A model's first vector registers it, with its dimensions (as add_node does).
                    PERFORM prme.register_embedding_model(v_item.embedding_model, v_dimensions_given);
                    v_count := v_dimensions_given;
                    v_dimensions := v_dimensions || jsonb_build_object(v_item.embedding_model, v_count);
                END IF;
                IF v_count IS NULL THEN
                    RAISE EXCEPTION USING
                        ERRCODE = 'PR422',
                        MESSAGE = format('unknown embedding model %s', quote_literal(left(v_item.embedding_model, 200))),
                        HINT = 'register it first with prme.register_embedding_model(model_id, dimensions)';
                END IF;
                -- embedding_dimensions, when given, is how many numbers the item's vector has.
                IF v_dimensions_given <> v_count THEN
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

            SELECT n.* INTO v_stored FROM prme.nodes AS n WHERE n.user_id = _add_nodes_refusal.user_id AND n.id = v_item.node_id;
            IF FOUND AND (v_stored.content, v_stored.scope, v_stored.namespace, v_stored.kind)
               IS DISTINCT FROM (v_node.content, v_node.scope, v_node.namespace, v_node.kind) THEN
                RAISE EXCEPTION USING
                    ERRCODE = 'PR409',
                    MESSAGE = 'a node with this node_id already exists with other content, scope, namespace or kind',
                    DETAIL = format('node_id %s', v_item.node_id);
            END IF;
            IF v_count IS NOT NULL THEN
                v_span_items[coalesce(cardinality(v_span_items), 0) + 1] := v_index;
                v_span_offsets[coalesce(cardinality(v_span_offsets), 0) + 1] := v_offset;
                v_offset := v_offset + v_count;
            END IF;
        END LOOP;
        -- Finite numbers only; the first bad one names its item.
        IF embeddings IS NOT NULL THEN
            v_bad_position := prme._first_not_finite(embeddings);
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
END;
$$;

COMMENT ON FUNCTION prme._add_nodes_refusal(text, jsonb, real[]) IS
'Internal: checks the items of a prme.add_nodes batch one by one, in order, by add_node''s rules, and raises the '
'first bad item''s error (PR422, PR409 for a taken node_id) as items[N]: why add_nodes refuses a batch.';

CREATE OR REPLACE FUNCTION prme.add_nodes(user_id text, items jsonb, embeddings real[] DEFAULT NULL)
RETURNS SETOF prme.node_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(add_nodes.user_id);
    v_now timestamptz := now();
    -- The first 16 hex digits of sha256(user_id): the owner key of nodes.search (prme._owner_lexemes).
    v_owner_key text := substr(encode(sha256(convert_to(v_user_id, 'UTF8')), 'hex'), 1, 16);
    v_numbers integer := coalesce(cardinality(embeddings), 0);
    v_bad integer;
    v_problem text;
    v_bad_position integer;
    v_refused boolean;
    v_numbers_used integer;
    v_results prme.node_view[];
    v_message text;
    v_detail text;
    v_state text;
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

    -- The batch is refused if an item's vector holds a number that is not finite.
    v_bad_position := prme._first_not_finite(embeddings);

    BEGIN
        -- A model's first vector registers it, with the dimensions its first item gives (as
        -- add_node does); the statement below reads the registered dimensions.
        PERFORM prme.register_embedding_model(f.model_id, f.dimensions::integer)
        FROM (
            SELECT DISTINCT ON (x.embedding_model) x.embedding_model AS model_id, x.embedding_dimensions AS dimensions
            FROM
                ROWS FROM (jsonb_to_recordset(items) AS (embedding_model text, embedding_dimensions text))
                WITH ORDINALITY AS x (embedding_model, embedding_dimensions, n)
            WHERE x.embedding_model IS NOT NULL
            ORDER BY x.embedding_model, x.n
        ) AS f
        WHERE
            f.dimensions IS NOT NULL
            AND NOT EXISTS (SELECT FROM prme.embedding_models AS m WHERE m.user_id = '*' AND m.model_id = f.model_id);

        -- The whole batch in one statement: each item's node by add_node's rules, its create
        -- record, its vector's numbers; written only when no item is refused (a helper that
        -- raises, or a rule below that refuses, sends the batch to prme._add_nodes_refusal).
        WITH item AS MATERIALIZED (
            -- add_node's arguments (080_add_node.sql), a null or absent field taking its default.
            SELECT
                x.n - 1 AS i,
                x.node_id,
                coalesce(x.node_id, gen_random_uuid()) AS id,
                coalesce(x.namespace, 'default') AS namespace,
                coalesce(x.scope, 'personal') AS scope,
                coalesce(x.kind, 'fact') AS kind,
                prme._valid_content(x.content) AS content,
                -- A default is not checked again: each call of a helper sets its search_path, which
                -- costs a few microseconds.
                CASE
                    WHEN x.confidence_base IS NULL THEN 0.5
                    ELSE prme._valid_fraction('confidence_base', x.confidence_base)
                END AS confidence_base,
                CASE
                    WHEN x.salience_base IS NULL THEN 0.5
                    ELSE prme._valid_fraction('salience_base', x.salience_base)
                END AS salience_base,
                coalesce(x.stability, 'low') AS stability,
                coalesce(x.decay_profile, 'medium') AS decay_profile,
                -- created_at: when the memory was first made elsewhere (an import), never in the future.
                CASE
                    WHEN x.created_at IS NULL THEN v_now
                    ELSE prme._valid_timestamp('created_at', x.created_at::timestamptz)
                END AS created_at,
                -- next_review_at: 'infinity' is no schedule (NULL); absent, one cadence ahead (below).
                x.next_review_at IS NULL AS on_cadence,
                CASE
                    WHEN x.next_review_at <> 'infinity'
                        THEN prme._valid_timestamp('next_review_at', x.next_review_at::timestamptz)
                END AS next_review_at,
                x.embedding_model,
                x.embedding_dimensions::integer AS embedding_dimensions,
                gen_random_uuid() AS operation_id
            FROM
                ROWS FROM (
                    jsonb_to_recordset(items) AS (
                        content text, scope text, namespace text, kind text, confidence_base numeric,
                        salience_base numeric, stability text, decay_profile text, next_review_at text,
                        node_id uuid, created_at text, embedding_model text, embedding_dimensions text
                    )
                ) WITH ORDINALITY AS x (
                    content, scope, namespace, kind, confidence_base, salience_base, stability, decay_profile,
                    next_review_at, node_id, created_at, embedding_model, embedding_dimensions, n
                )
        ),

        place AS MATERIALIZED (
            -- Each distinct namespace, scope and kind of the batch checked once (a batch repeats
            -- them, and each check is a regular expression).
            SELECT
                d.namespace,
                d.scope,
                d.kind,
                prme._valid_name('namespace', d.namespace)::prme.slug AS namespace_name,
                prme._valid_name('scope', d.scope)::prme.slug AS scope_name,
                prme._valid_name('kind', d.kind)::prme.slug AS kind_name
            FROM (SELECT DISTINCT i.namespace, i.scope, i.kind FROM item AS i) AS d
        ),

        cadence AS MATERIALIZED (
            -- A memory's first review: one cadence of its stability ahead (the owner's setting).
            SELECT
                d.stability,
                prme._plus_cadence(v_now, (prme._maintenance_setting(v_user_id, d.stability)).review_cadence) AS first_review
            FROM (SELECT DISTINCT i.stability FROM item AS i) AS d
        ),

        node AS MATERIALIZED (
            SELECT
                i.i,
                i.operation_id,
                i.embedding_model,
                m.dimensions,
                sum(m.dimensions) OVER (ORDER BY i.i) AS span_end,  -- its vector's last number
                s.id IS NOT NULL AS replay,
                s AS stored,
                -- What add_node refuses that no helper above raised for.
                i.stability NOT IN ('low', 'semi-stable', 'stable')
                OR i.decay_profile NOT IN ('permanent', 'slow', 'medium', 'fast', 'rapid')
                OR i.created_at > v_now
                OR (i.embedding_model IS NOT NULL AND (m.dimensions IS NULL OR i.embedding_dimensions <> m.dimensions))
                OR (
                    s.id IS NOT NULL
                    AND (s.content, s.scope, s.namespace, s.kind)
                    IS DISTINCT FROM (i.content, p.scope_name, p.namespace_name, p.kind_name)
                ) AS refused,
                -- The node row, in prme.nodes' column order (last_checksum and derived columns
                -- aside): a row of the table's type, so that prme._node_state and
                -- prme._node_view read it as they read add_node's.
                ROW(
                    i.id, v_user_id, p.namespace_name, p.scope_name, p.kind_name, i.content, i.confidence_base,
                    i.salience_base, 0, NULL, '{}',
                    CASE WHEN i.stability IN ('low', 'semi-stable', 'stable') THEN i.stability END,
                    CASE WHEN i.on_cadence THEN c.first_review ELSE i.next_review_at END, 'active',
                    CASE WHEN i.decay_profile IN ('permanent', 'slow', 'medium', 'fast', 'rapid') THEN i.decay_profile END,
                    i.created_at, v_now, 1, NULL, NULL, 0, 0, 0, 0, 0, NULL, 0, 0, 0, 0, NULL, NULL, 0
                )::prme.nodes AS node
            FROM item AS i
            INNER JOIN place AS p ON (p.namespace, p.scope, p.kind) = (i.namespace, i.scope, i.kind)
            INNER JOIN cadence AS c ON c.stability = i.stability
            LEFT JOIN prme.embedding_models AS m ON m.user_id = '*' AND m.model_id = i.embedding_model
            LEFT JOIN prme.nodes AS s ON s.user_id = v_user_id AND s.id = i.node_id
        ),

        verdict AS MATERIALIZED (
            SELECT
                coalesce(bool_or(b.refused OR b.span_end > v_numbers), FALSE)
                OR coalesce(v_bad_position <= max(b.span_end), FALSE) AS refused,
                coalesce(max(b.span_end), 0) AS numbers_used
            FROM node AS b
        ),

        created AS MATERIALIZED (
            -- Each new memory and its create record, as prme._journal_entry builds it.
            SELECT
                b.node,
                b.operation_id,
                b.embedding_model,
                b.dimensions,
                b.span_end,
                prme._journal_record_v2(
                    'create', NULL, b.operation_id, NULL, v_user_id, (b.node).id, NULL, NULL,
                    prme._node_state(b.node), NULL, v_now
                ) AS record
            FROM node AS b
            WHERE
                NOT b.replay
                AND (SELECT NOT v.refused AND v.numbers_used = v_numbers FROM verdict AS v)
        ),

        entry AS MATERIALIZED (
            SELECT c.*, encode(sha256(convert_to(c.record, 'UTF8')), 'hex') AS checksum FROM created AS c
        ),

        written AS (
            INSERT INTO prme.nodes (
                id, user_id, namespace, scope, kind, content, confidence_base, salience_base, reinforcement_boost,
                last_reinforced_at, evidence_refs, stability, next_review_at, lifecycle_state, decay_profile,
                created_at, updated_at, version, last_checksum, search
            )
            SELECT
                (e.node).id, (e.node).user_id, (e.node).namespace, (e.node).scope, (e.node).kind, (e.node).content,
                (e.node).confidence_base, (e.node).salience_base, (e.node).reinforcement_boost,
                (e.node).last_reinforced_at, (e.node).evidence_refs, (e.node).stability, (e.node).next_review_at,
                (e.node).lifecycle_state, (e.node).decay_profile, (e.node).created_at, (e.node).updated_at,
                (e.node).version, e.checksum,
                -- prme._owner_lexemes(user_id, content): recall's words (040_nodes.sql, the rules of
                -- prme._recall_words), each after the owner's key, computed here in one pass
                -- (array_to_tsvector sorts them and drops repeats) and without a function call
                -- per memory: a third of the cost (tests/test_add_nodes.py compares them).
                -- lower() under "C" lower-cases ASCII letters only, as _recall_words' translate().
                array_to_tsvector(array(
                    SELECT
                        v_owner_key || '/' || CASE
                            WHEN length(t.token) < 4 THEN t.token
                            WHEN t.token LIKE '%ies' AND t.token NOT LIKE '%eies' AND t.token NOT LIKE '%aies'
                                THEN substr(t.token, 1, length(t.token) - 3) || 'y'
                            WHEN
                                t.token LIKE '%es' AND t.token NOT LIKE '%aes' AND t.token NOT LIKE '%ees'
                                AND t.token NOT LIKE '%oes'
                                THEN substr(t.token, 1, length(t.token) - 1)
                            WHEN t.token LIKE '%s' AND t.token NOT LIKE '%us' AND t.token NOT LIKE '%ss'
                                THEN substr(t.token, 1, length(t.token) - 1)
                            ELSE t.token
                        END
                    FROM regexp_split_to_table(
                        lower((e.node).content COLLATE "C") COLLATE "default",
                        E'[\\x01-\\x2f\\x3a-\\x40\\x5b-\\x60\\x7b-\\xbf\\xd7\\xf7\\u2000-\\u206f\\u3000-\\u303f\\ufeff]+'
                    ) AS t (token)
                    WHERE t.token <> '' AND length(t.token) <= 100 AND t.token <> ALL (prme._stop_words())
                ))
            FROM entry AS e
        ),

        journaled AS (
            INSERT INTO prme.journal (
                user_id, node_id, node_version, record_version, op, operation_id, request_id, evidence_id, record,
                checksum, prev_checksum, recorded_at, key_namespace
            )
            SELECT v_user_id, (e.node).id, 1, 2, 'create', e.operation_id, NULL, NULL, e.record, e.checksum, NULL, v_now, NULL
            FROM entry AS e
        ),

        vectors AS (
            INSERT INTO prme.node_embeddings (user_id, node_id, model_id, embedding)
            -- Sliced from a plain copy of embeddings made once (an uncorrelated subquery): the
            -- PL/pgSQL argument is an expanded array, which each slice would first copy whole.
            SELECT
                v_user_id, (e.node).id, e.embedding_model,
                ((SELECT array_cat(embeddings, '{}')))[e.span_end - e.dimensions + 1:e.span_end]
            FROM entry AS e
            WHERE e.embedding_model IS NOT NULL
        )

        SELECT
            v.refused,
            v.numbers_used,
            array(
                SELECT CASE WHEN b.replay THEN prme._node_view(b.stored, TRUE) ELSE prme._node_view(b.node, FALSE) END
                FROM node AS b
                ORDER BY b.i
            )
        INTO v_refused, v_numbers_used, v_results
        FROM verdict AS v;
    EXCEPTION
        WHEN unique_violation THEN
            -- Another call created one of these node ids after this one looked: retrying the
            -- batch answers it as a replay.
            RAISE EXCEPTION USING
                ERRCODE = 'PR409', MESSAGE = 'a concurrent call created one of these node_ids: retry the batch';
        WHEN SQLSTATE 'PR422' OR SQLSTATE 'PR409' OR data_exception OR check_violation THEN
            GET STACKED DIAGNOSTICS
                v_message = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL, v_state = RETURNED_SQLSTATE;
            v_refused := TRUE;
    END;

    IF v_refused THEN
        -- Nothing was written. The items one by one, in order: raises the first bad item's error.
        PERFORM prme._add_nodes_refusal(v_user_id, items, embeddings);
        RAISE EXCEPTION USING
            ERRCODE = 'XX000',
            MESSAGE = 'add_nodes refused a batch whose items prme._add_nodes_refusal accepts',
            DETAIL = concat_ws(': ', v_state, v_message, v_detail);
    END IF;
    IF v_numbers <> v_numbers_used THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'embeddings must hold exactly the numbers of the items'' vectors',
            DETAIL = format('got %s numbers, the items'' embedding models take %s', cardinality(embeddings), v_numbers_used);
    END IF;

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
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (26, 'set_based_add_nodes', '2a0ceab907dbec687aa9ef80520e73df646873c7b2ccd6ff4c2f861d8ee71f1b');

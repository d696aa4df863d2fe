-- =============================================================================
-- prme-pg: embeddings (derived state for recall by meaning)
--
-- A memory's embedding is computed from its immutable content by a named model,
-- outside the database (the clients and `prme-pg embed` run the model), and stored
-- here with that model's id. It is not part of the journaled node: no journal
-- record names it, and reinforce, outcomes and decay never write it.
--
--   embedding_models   the models vectors may be stored for, with their dimensions;
--                      rows of the reserved owner '*' (like maintenance_settings'
--                      defaults): a model is cluster-wide, registered once.
--   node_embeddings    one row per memory and model: the vector, or the error of a
--                      failed attempt (the worker records it and goes on).
--
-- Recall finds an owner's nearest vectors exactly, by a scan of the owner's rows,
-- until prme.index_embeddings (run by `prme-pg embed` and the worker) has moved an
-- owner with many vectors into the model's HNSW index (`indexed`): recall then asks
-- the index for those and scans the few stored since (docs/RECALL.md, "Scale"). A
-- vector is stored unindexed, so writing one never waits on the graph.
--
-- The vector column is pgvector's `vector` when the server has pgvector (010 creates
-- the extension), else real[]: the schema applies on a server without pgvector, and
-- recall is then lexical (prme._vector_schema() is NULL). prme.enable_vector_search()
-- converts the column once pgvector is installed. Similarity is computed by pgvector,
-- qualified with the extension's schema, which is known only at run time (API functions
-- pin search_path to pg_catalog): in dynamic SQL, or through prme._inner_product, which
-- is defined with that schema.
-- =============================================================================

CREATE TABLE prme.embedding_models (
    user_id text NOT NULL CHECK (user_id = '*'),
    model_id text NOT NULL CHECK (
        char_length(model_id) BETWEEN 1 AND 200 AND model_id !~ '[[:cntrl:]]'
    ),
    dimensions integer NOT NULL CHECK (dimensions BETWEEN 1 AND 4096),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (user_id, model_id)
);

COMMENT ON TABLE prme.embedding_models IS
'Embedding models vectors are stored for, with their dimensions (prme.register_embedding_model). Cluster-wide: '
'every row belongs to the reserved owner ''*''. See docs/RECALL.md.';

DO $table$
DECLARE
    v_schema text := (
        SELECT e.extnamespace::regnamespace::text FROM pg_catalog.pg_extension AS e WHERE e.extname = 'vector'
    );
BEGIN
    EXECUTE pg_catalog.format(
        $sql$
        CREATE TABLE prme.node_embeddings (
            user_id text NOT NULL,
            node_id uuid NOT NULL,
            model_id text NOT NULL,
            embedding %s,
            error text CHECK (octet_length(error) <= 2000),
            embedded_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
            indexed boolean NOT NULL DEFAULT false,
            PRIMARY KEY (user_id, model_id, node_id),
            FOREIGN KEY (user_id, node_id) REFERENCES prme.nodes (user_id, id),
            CHECK ((embedding IS NULL) <> (error IS NULL))
        )
        $sql$,
        coalesce(pg_catalog.quote_ident(v_schema) || '.vector', 'real[]')
    );
END
$table$;

COMMENT ON TABLE prme.node_embeddings IS
'Derived state: a memory''s embedding by one model (pgvector''s vector, or real[] on a server without pgvector), '
'or the error of a failed attempt. Not journaled. See docs/RECALL.md.';
COMMENT ON COLUMN prme.node_embeddings.indexed IS
'Whether the vector is in its model''s HNSW index (prme.index_embeddings moves the vectors of owners with many); '
'recall scans the others exactly.';

-- The vectors recall scans exactly: every owner's until the owner's are indexed, then
-- those stored since. Also how prme.index_embeddings finds what to move.
CREATE INDEX node_embeddings_unindexed_idx ON prme.node_embeddings (model_id, user_id, node_id)
WHERE NOT indexed AND embedding IS NOT NULL;

-- The owners whose vectors of a model are indexed (recall's choice of path).
CREATE INDEX node_embeddings_indexed_idx ON prme.node_embeddings (user_id, model_id)
WHERE indexed;

CREATE FUNCTION prme._vector_schema()
RETURNS text
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
RETURN (
    SELECT quote_ident(n.nspname)
    FROM pg_catalog.pg_attribute AS a
    INNER JOIN pg_catalog.pg_type AS t ON a.atttypid = t.oid
    INNER JOIN pg_catalog.pg_namespace AS n ON t.typnamespace = n.oid
    WHERE a.attrelid = 'prme.node_embeddings'::regclass AND a.attname = 'embedding' AND t.typname = 'vector'
);

COMMENT ON FUNCTION prme._vector_schema() IS
'Internal: the quoted schema of pgvector''s types when prme.node_embeddings stores pgvector vectors, else NULL '
'(no pgvector: recall is lexical).';

-- recall's main statement is static SQL (PostgreSQL keeps its plan), which cannot name
-- pgvector's schema; it reads a finalist's cosine through prme._inner_product, which
-- does: defined here, and again by prme.enable_vector_search, for the column's type.
CREATE FUNCTION prme._define_inner_product()
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_vectors text := prme._vector_schema();
BEGIN
    -- LANGUAGE sql, one expression, no SET clause: inlined into its caller's plan. Both
    -- vectors are taken as the column's type, so neither is converted row by row.
    IF v_vectors IS NULL THEN
        CREATE OR REPLACE FUNCTION prme._inner_product(stored real[], query real[])
        RETURNS double precision
        LANGUAGE sql
        IMMUTABLE
        PARALLEL SAFE
        RETURN (
            SELECT sum(x.stored::double precision * x.query::double precision)
            FROM ROWS FROM (unnest(stored), unnest(query)) AS x (stored, query)
        );
        CREATE OR REPLACE FUNCTION prme._query_vector(query real[])
        RETURNS real[]
        LANGUAGE sql
        IMMUTABLE
        PARALLEL SAFE
        RETURN query;
    ELSE
        DROP FUNCTION IF EXISTS prme._query_vector(real[]);  -- its result type changes
        EXECUTE format(
            $sql$
            CREATE OR REPLACE FUNCTION prme._inner_product(stored %1$s.vector, query %1$s.vector)
            RETURNS double precision
            LANGUAGE sql
            IMMUTABLE
            PARALLEL SAFE
            RETURN %1$s.inner_product(stored, query)
            $sql$,
            v_vectors
        );
        EXECUTE format(
            $sql$
            CREATE OR REPLACE FUNCTION prme._query_vector(query real[])
            RETURNS %1$s.vector
            LANGUAGE sql
            IMMUTABLE
            PARALLEL SAFE
            RETURN query::%1$s.vector
            $sql$,
            v_vectors
        );
        -- Those defined before pgvector, when it comes later.
        DROP FUNCTION IF EXISTS prme._inner_product(real[], real[]);
    END IF;
    EXECUTE format(
        'COMMENT ON FUNCTION prme._inner_product(%1$s, %1$s) IS %2$L',
        coalesce(v_vectors || '.vector', 'real[]'),
        'Internal: the inner product of a stored vector and a query vector (prme._query_vector), their cosine as '
        'both are unit length; by pgvector when the server has it. Defined by prme._define_inner_product.'
    );
    COMMENT ON FUNCTION prme._query_vector(real[]) IS
    'Internal: a query vector as prme._inner_product takes it: pgvector''s vector when the server has it, else '
    'real[]. Defined by prme._define_inner_product.';
END;
$$;

COMMENT ON FUNCTION prme._define_inner_product() IS
'Internal: (re)defines prme._inner_product and prme._query_vector for the vector column''s type: by pgvector, or '
'in SQL without it.';

SELECT prme._define_inner_product();

CREATE FUNCTION prme.enable_vector_search()
RETURNS TABLE (vector_search boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_schema text := (
        SELECT quote_ident(e.extnamespace::regnamespace::text) FROM pg_catalog.pg_extension AS e WHERE e.extname = 'vector'
    );
BEGIN
    IF v_schema IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'pgvector is not installed in this database',
            HINT = 'install it (postgresql-NN-pgvector), then as a superuser: CREATE EXTENSION vector';
    END IF;
    IF prme._vector_schema() IS NULL THEN
        EXECUTE format(
            'ALTER TABLE prme.node_embeddings ALTER COLUMN embedding TYPE %1$s.vector USING embedding::%1$s.vector',
            v_schema
        );
    END IF;
    PERFORM prme._define_inner_product();
    RETURN QUERY SELECT TRUE;
END;
$$;

COMMENT ON FUNCTION prme.enable_vector_search() IS
'Turns recall by meaning on in a database migrated without pgvector, once CREATE EXTENSION vector has run: '
'converts prme.node_embeddings.embedding to pgvector''s vector (rewriting the table) and redefines the helpers '
'that compute with it. Idempotent. PR422 without pgvector. See docs/RECALL.md.';

REVOKE ALL ON FUNCTION prme.enable_vector_search() FROM public;
GRANT EXECUTE ON FUNCTION prme.enable_vector_search() TO prme_app;

CREATE FUNCTION prme._valid_embedding(model_id text, embedding real[])
RETURNS real[]
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_dimensions integer;
BEGIN
    IF embedding IS NULL THEN
        RETURN NULL;
    END IF;
    IF model_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'an embedding needs its embedding_model';
    END IF;
    SELECT m.dimensions INTO v_dimensions
    FROM prme.embedding_models AS m
    WHERE m.user_id = '*' AND m.model_id = _valid_embedding.model_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('unknown embedding model %s', quote_literal(left(model_id, 200))),
            HINT = 'register it first with prme.register_embedding_model(model_id, dimensions)';
    END IF;
    IF array_ndims(embedding) <> 1 OR cardinality(embedding) <> v_dimensions THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('embedding must have %s dimensions for model %s', v_dimensions, quote_literal(model_id)),
            DETAIL = format('got %s', coalesce(array_dims(embedding), 'none'));
    END IF;
    -- NaN and infinity compare equal to themselves in PostgreSQL's float order, so
    -- look them up by name; NULL components are not numbers either (array_position finds
    -- NULL too; in C, a sixth of the time of a query over unnest).
    IF array_position(embedding, 'NaN'::real) IS NOT NULL
       OR array_position(embedding, 'Infinity'::real) IS NOT NULL
       OR array_position(embedding, '-Infinity'::real) IS NOT NULL
       OR array_position(embedding, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'embedding must hold finite numbers (no NULL, NaN or infinity)';
    END IF;
    RETURN embedding;
END;
$$;

COMMENT ON FUNCTION prme._valid_embedding(text, real[]) IS
'Internal: the embedding if it fits its registered model (one dimension of the model''s size, finite components); '
'PR422 otherwise. NULL stays NULL.';

CREATE FUNCTION prme.register_embedding_model(model_id text, dimensions integer)
RETURNS TABLE (vector_search boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_model prme.embedding_models;
BEGIN
    IF register_embedding_model.model_id IS NULL
       OR char_length(register_embedding_model.model_id) NOT BETWEEN 1 AND 200
       OR register_embedding_model.model_id ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'embedding model id must be 1 to 200 characters, no control characters';
    END IF;
    IF register_embedding_model.dimensions IS NULL OR register_embedding_model.dimensions NOT BETWEEN 1 AND 4096 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'embedding dimensions must be between 1 and 4096';
    END IF;
    INSERT INTO prme.embedding_models (user_id, model_id, dimensions)
    VALUES ('*', register_embedding_model.model_id, register_embedding_model.dimensions)
    ON CONFLICT DO NOTHING;
    SELECT m.* INTO v_model
    FROM prme.embedding_models AS m
    WHERE m.user_id = '*' AND m.model_id = register_embedding_model.model_id;
    IF v_model.dimensions <> register_embedding_model.dimensions THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR409',
            MESSAGE = format(
                'embedding model %s is registered with %s dimensions, not %s',
                quote_literal(v_model.model_id), v_model.dimensions, register_embedding_model.dimensions
            );
    END IF;
    RETURN QUERY SELECT prme._vector_schema() IS NOT NULL;
END;
$$;

COMMENT ON FUNCTION prme.register_embedding_model(text, integer) IS
'Registers an embedding model and its dimensions (idempotent); PR409 if the id is registered with other '
'dimensions. Returns whether this server searches by meaning (pgvector): without it vectors are kept and recall '
'matches words only. A set (one row) so that the PL/Proxy tier registers on every shard.';

REVOKE ALL ON FUNCTION prme.register_embedding_model(text, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.register_embedding_model(text, integer) TO prme_app;

CREATE FUNCTION prme.pending_embeddings(
    model_id text,
    max_count integer DEFAULT 500,
    retry_failed boolean DEFAULT FALSE,
    after_user_id text DEFAULT NULL,
    after_node_id uuid DEFAULT NULL
)
RETURNS TABLE (user_id text, node_id uuid, content text)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- A page is the next max_count memories in the primary key with an index probe each into
-- node_embeddings: planned from statistics taken before the worker stored thousands of
-- vectors, a hash or sequential plan would read every vector again on every page.
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    IF pending_embeddings.max_count IS NULL OR pending_embeddings.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    -- Every owner's memories that can be recalled and have no vector of this model
    -- (or, with retry_failed, a recorded failure), in primary key order after the
    -- given one: a pass pages through once; a worker that stops and starts again
    -- simply asks again.
    RETURN QUERY
    SELECT n.user_id, n.id, n.content
    FROM prme.nodes AS n
    WHERE (pending_embeddings.after_user_id IS NULL
           OR (n.user_id, n.id) > (pending_embeddings.after_user_id, pending_embeddings.after_node_id))
      AND n.lifecycle_state NOT IN ('archived', 'deprecated')
      AND NOT EXISTS (
          SELECT FROM prme.node_embeddings AS e
          WHERE e.user_id = n.user_id AND e.model_id = pending_embeddings.model_id AND e.node_id = n.id
            AND (e.embedding IS NOT NULL OR NOT pending_embeddings.retry_failed)
      )
    ORDER BY n.user_id, n.id
    LIMIT pending_embeddings.max_count;
END;
$$;

COMMENT ON FUNCTION prme.pending_embeddings(text, integer, boolean, text, uuid) IS
'Memories of every owner that recall may return and that have no embedding by model_id yet (with retry_failed, also '
'those whose last attempt failed), at most max_count, in (user_id, node_id) order after (after_user_id, '
'after_node_id) when given. For the embedding worker.';

REVOKE ALL ON FUNCTION prme.pending_embeddings(text, integer, boolean, text, uuid) FROM public;
GRANT EXECUTE ON FUNCTION prme.pending_embeddings(text, integer, boolean, text, uuid) TO prme_app;

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

CREATE FUNCTION prme.store_embeddings(
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

REVOKE ALL ON FUNCTION prme.store_embeddings(text, text[], uuid[], real[], text[]) FROM public;
GRANT EXECUTE ON FUNCTION prme.store_embeddings(text, text[], uuid[], real[], text[]) TO prme_app;

CREATE FUNCTION prme.embedding_status(model_id text)
RETURNS TABLE (vector_search boolean, registered boolean, dimensions integer, pending bigint, failed bigint)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT
        prme._vector_schema() IS NOT NULL,
        m.model_id IS NOT NULL,
        m.dimensions,
        (SELECT count(*) FROM prme.nodes AS n
         WHERE n.lifecycle_state NOT IN ('archived', 'deprecated')
           AND NOT EXISTS (
               SELECT FROM prme.node_embeddings AS e
               WHERE e.user_id = n.user_id AND e.model_id = embedding_status.model_id AND e.node_id = n.id
           )),
        (SELECT count(*) FROM prme.node_embeddings AS e
         WHERE e.model_id = embedding_status.model_id AND e.error IS NOT NULL)
    FROM (SELECT 1) AS one
    LEFT JOIN prme.embedding_models AS m ON m.user_id = '*' AND m.model_id = embedding_status.model_id;
END;
$$;

COMMENT ON FUNCTION prme.embedding_status(text) IS
'Whether this server can search by meaning (pgvector), whether model_id is registered, its dimensions, how many '
'recallable memories of every owner await an embedding by it, and how many attempts failed.';

REVOKE ALL ON FUNCTION prme.embedding_status(text) FROM public;
GRANT EXECUTE ON FUNCTION prme.embedding_status(text) TO prme_app;

CREATE FUNCTION prme._vector_index(model_id text)
RETURNS text
LANGUAGE sql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
RETURN 'node_embeddings_hnsw_' || substr(encode(sha256(convert_to(model_id, 'UTF8')), 'hex'), 1, 16);

COMMENT ON FUNCTION prme._vector_index(text) IS
'Internal: the name of model_id''s HNSW index on prme.node_embeddings (16 hex digits of sha256(model_id): any '
'model id gives a valid, distinct name).';

CREATE FUNCTION prme.index_embeddings(
    model_id text DEFAULT NULL,
    min_vectors integer DEFAULT 5000,
    max_count integer DEFAULT 2000
)
RETURNS TABLE (indexed integer)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_vectors text := prme._vector_schema();
    v_index text := prme._vector_index(index_embeddings.model_id);
    v_dimensions integer;
    v_first boolean;
    v_indexed integer := 0;
    v_model text;
BEGIN
    IF index_embeddings.min_vectors IS NULL OR index_embeddings.min_vectors NOT BETWEEN 1 AND 1000000000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'min_vectors must be between 1 and 1000000000';
    END IF;
    IF index_embeddings.max_count IS NULL OR index_embeddings.max_count NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 100000';
    END IF;
    IF index_embeddings.model_id IS NULL THEN
        -- Every registered model in turn (what a scheduled job runs: it knows no model).
        FOR v_model IN
            SELECT m.model_id FROM prme.embedding_models AS m WHERE m.user_id = '*' ORDER BY m.model_id
        LOOP
            v_indexed := v_indexed + (
                SELECT i.indexed
                FROM prme.index_embeddings(v_model, index_embeddings.min_vectors, index_embeddings.max_count) AS i
            );
        END LOOP;
        RETURN QUERY SELECT v_indexed;
        RETURN;
    END IF;
    SELECT m.dimensions INTO v_dimensions
    FROM prme.embedding_models AS m
    WHERE m.user_id = '*' AND m.model_id = index_embeddings.model_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('unknown embedding model %s', quote_literal(left(index_embeddings.model_id, 200))),
            HINT = 'register it first with prme.register_embedding_model(model_id, dimensions)';
    END IF;
    -- No pgvector: recall matches words. Before 0.8 its HNSW scans stop at hnsw.ef_search
    -- rows, so other owners' vectors would crowd an owner's out: recall scans instead.
    IF v_vectors IS NULL OR (
        SELECT (regexp_match(e.extversion, '^([0-9]+)[.]([0-9]+)'))::integer[] < ARRAY[0, 8]
        FROM pg_catalog.pg_extension AS e WHERE e.extname = 'vector'
    ) THEN
        RETURN QUERY SELECT 0;
        RETURN;
    END IF;
    -- The model's index is built over the first max_count vectors moved, and every later
    -- one is inserted into it: each call's work, and the SHARE lock of the build (vector
    -- writes wait for it), stay bounded whatever the owners hold.
    v_first := to_regclass('prme.' || quote_ident(v_index)) IS NULL;

    -- An owner qualifies with min_vectors unindexed vectors (an owner none of whose
    -- vectors is indexed has only those) or when some of its vectors are indexed already.
    WITH owners AS (
        SELECT u.user_id FROM (
            SELECT v.user_id, count(*) AS unindexed
            FROM prme.node_embeddings AS v
            WHERE v.model_id = index_embeddings.model_id AND NOT v.indexed AND v.embedding IS NOT NULL
            GROUP BY v.user_id
        ) AS u
        WHERE u.unindexed >= index_embeddings.min_vectors
           OR EXISTS (
               SELECT FROM prme.node_embeddings AS i
               WHERE i.user_id = u.user_id AND i.model_id = index_embeddings.model_id AND i.indexed
           )
    ),
    picked AS (
        SELECT v.user_id, v.node_id
        FROM owners AS o
        INNER JOIN prme.node_embeddings AS v
            ON v.model_id = index_embeddings.model_id AND v.user_id = o.user_id
        WHERE NOT v.indexed AND v.embedding IS NOT NULL
        LIMIT index_embeddings.max_count
        FOR UPDATE OF v SKIP LOCKED
    )
    UPDATE prme.node_embeddings AS e SET indexed = TRUE
    FROM picked AS p
    WHERE e.user_id = p.user_id AND e.model_id = index_embeddings.model_id AND e.node_id = p.node_id;
    GET DIAGNOSTICS v_indexed = ROW_COUNT;

    IF v_first AND v_indexed > 0 THEN
        -- Inner product on unit vectors is the cosine; the cast gives the column the
        -- model's dimensions, which an HNSW index needs. Recall's query repeats it. A graph
        -- built with pgvector's default ef_construction (64) missed most of the nearest for
        -- some questions; with 200 its searches find them for about the same cost
        -- (docs/RECALL.md, "Scale"), each insert costing more, in the background.
        EXECUTE format(
            'CREATE INDEX %I ON prme.node_embeddings USING hnsw ((embedding::%s.vector(%s)) %s.vector_ip_ops) '
            'WITH (m = 16, ef_construction = 200) WHERE model_id = %L AND indexed',
            v_index, v_vectors, v_dimensions, v_vectors, index_embeddings.model_id
        );
        -- Most of the model's rows changed side at once: plan recall with that known.
        ANALYZE prme.node_embeddings;
    END IF;
    RETURN QUERY SELECT v_indexed;
END;
$$;

COMMENT ON FUNCTION prme.index_embeddings(text, integer, integer) IS
'Moves vectors of model_id (NULL: of every registered model) into the model''s HNSW index: those of every owner with '
'at least min_vectors of them, and those stored since for owners already indexed, at most max_count per call and '
'model (the index is built over the first ones). Returns how many moved (0: nothing left, or no '
'pgvector 0.8). Recall by meaning is exact for the other owners and approximate (the index''s) for these. For the '
'embedding worker and a scheduled job; see docs/RECALL.md, "Scale".';

REVOKE ALL ON FUNCTION prme.index_embeddings(text, integer, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.index_embeddings(text, integer, integer) TO prme_app;

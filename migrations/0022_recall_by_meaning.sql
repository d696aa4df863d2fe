-- prme-pg migration 0022_recall_by_meaning: embeddings and hybrid recall (issue 31).
--
-- 1. pgvector, when the server has it (a superuser applies migrations): CREATE EXTENSION
--    vector in the session's creation schema, or the installation already there. Without it,
--    or with prme.vector_search = off in the migrating session, everything applies the same;
--    node_embeddings.embedding is then real[] and recall matches words only. To add
--    pgvector later, as a superuser: CREATE EXTENSION vector; ALTER TABLE
--    prme.node_embeddings ALTER COLUMN embedding TYPE vector USING embedding::vector.
-- 2. prme.embedding_models (registered models and their dimensions, cluster-wide rows of
--    the reserved owner '*') and prme.node_embeddings (a memory's vector per model, or
--    the error of a failed attempt): derived state, not journaled, never written by
--    reinforce, outcomes or decay. New functions: register_embedding_model,
--    pending_embeddings, store_embeddings, embedding_status (granted to prme_app), and
--    the internal _vector_schema and _valid_embedding.
-- 3. prme.add_node takes embedding real[] and embedding_model text (both optional): the
--    vector is stored beside the memory in the same transaction. The old signature is
--    dropped; calls by name, as every client makes them, are unchanged.
-- 4. prme.recall takes query_embedding real[] and embedding_model text (both optional) and
--    ranks by hybrid relevance: the idf-weighted share of the query's words (BM25's idf
--    over the candidates) fused 0.6/0.4 with cosine similarity, then strength as before.
--    Without a query vector relevance is the idf-weighted share alone (before: the
--    unweighted share). The old signature is dropped.
--
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0022_recall_by_meaning.sql
-- (or prme-pg migrate). Locks: none on existing tables but a SHARE ROW EXCLUSIVE on
-- prme.nodes for the new foreign key (brief: the new table is empty). Nothing is
-- rewritten; existing memories have no vector until `prme-pg embed` (or the worker)
-- passes, and are recalled by their words meanwhile.

-- pgvector, when the server has it: recall by meaning (305_embeddings.sql). Without it
-- (or with prme.vector_search = off in the session that migrates) everything else is
-- the same and recall matches words only. Created by the superuser that migrates, in the
-- session's creation schema; an existing installation is used wherever it is.
DO $vector$
BEGIN
    IF coalesce(current_setting('prme.vector_search', TRUE), '') <> 'off'
       AND EXISTS (SELECT FROM pg_catalog.pg_available_extensions WHERE name = 'vector') THEN
        CREATE EXTENSION IF NOT EXISTS vector;
    END IF;
END
$vector$;

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/305_embeddings.sql

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
    -- test them by name; NULL components are not numbers either.
    IF EXISTS (
        SELECT FROM unnest(embedding) AS c (component)
        WHERE c.component IS NULL OR c.component IN ('NaN'::real, 'Infinity'::real, '-Infinity'::real)
    ) THEN
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
    SELECT m.dimensions INTO v_dimensions
    FROM prme.embedding_models AS m
    WHERE m.user_id = '*' AND m.model_id = store_embeddings.model_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('unknown embedding model %s', quote_literal(left(store_embeddings.model_id, 200))),
            HINT = 'register it first with prme.register_embedding_model(model_id, dimensions)';
    END IF;
    IF v_count = 0 THEN
        RETURN QUERY SELECT 0;
        RETURN;
    END IF;
    IF store_embeddings.errors IS NOT NULL AND cardinality(store_embeddings.errors) <> v_count THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'errors must have one entry per node_id';
    END IF;
    -- embeddings holds the vectors one after another, the model's dimensions each (a
    -- flat array: a row is a slice of it, read without copying the rest).
    IF array_ndims(store_embeddings.embeddings) <> 1
       OR cardinality(store_embeddings.embeddings) <> v_count * v_dimensions THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('embeddings must hold %s vectors of %s numbers, one after another', v_count, v_dimensions),
            DETAIL = format('got %s numbers', coalesce(cardinality(store_embeddings.embeddings), 0));
    END IF;
    -- Containment and array_position instead of unnest: four times faster over a batch's
    -- 256,000 numbers (bench/proposals/05_store_embeddings_check.sql); NaN equals NaN here.
    IF store_embeddings.embeddings @> ARRAY['NaN'::real]
       OR store_embeddings.embeddings @> ARRAY['Infinity'::real]
       OR store_embeddings.embeddings @> ARRAY['-Infinity'::real]
       OR array_position(store_embeddings.embeddings, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'embeddings must hold finite numbers (no NULL, NaN or infinity)';
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

-- >>> sql/postgres/080_add_node.sql

DROP FUNCTION prme.add_node(text, text, text, text, text, numeric, numeric, text, text, timestamptz, uuid);

CREATE FUNCTION prme.add_node(
    user_id text,
    content text,
    scope text DEFAULT 'personal',
    namespace text DEFAULT 'default',
    kind text DEFAULT 'fact',
    confidence_base numeric DEFAULT 0.5,
    salience_base numeric DEFAULT 0.5,
    stability text DEFAULT 'low',
    decay_profile text DEFAULT 'medium',
    next_review_at timestamptz DEFAULT NULL,
    node_id uuid DEFAULT NULL,
    embedding real[] DEFAULT NULL,
    embedding_model text DEFAULT NULL
)
RETURNS prme.node_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_node prme.nodes;
    v_entry prme.journal;
    v_now timestamptz := now();
    v_embedding real[];
BEGIN
    -- A model's first vector registers it with its dimensions (each shard its own, behind
    -- PL/Proxy); a known model's vector must fit it.
    IF add_node.embedding IS NOT NULL AND add_node.embedding_model IS NOT NULL
       AND NOT EXISTS (
           SELECT FROM prme.embedding_models AS m WHERE m.user_id = '*' AND m.model_id = add_node.embedding_model
       ) THEN
        PERFORM prme.register_embedding_model(add_node.embedding_model, cardinality(add_node.embedding));
    END IF;
    v_embedding := prme._valid_embedding(add_node.embedding_model, add_node.embedding);
    v_node.id := coalesce(add_node.node_id, gen_random_uuid());
    v_node.user_id := prme._valid_user_id(add_node.user_id);
    v_node.namespace := prme._valid_name('namespace', add_node.namespace);
    v_node.scope := prme._valid_name('scope', add_node.scope);
    v_node.kind := prme._valid_name('kind', add_node.kind);
    v_node.content := prme._valid_content(add_node.content);
    v_node.confidence_base := prme._valid_fraction('confidence_base', add_node.confidence_base);
    v_node.salience_base := prme._valid_fraction('salience_base', add_node.salience_base);
    v_node.reinforcement_boost := 0;
    v_node.evidence_refs := '{}';
    IF add_node.stability IS NULL OR add_node.stability NOT IN ('low', 'semi-stable', 'stable') THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'stability must be low, semi-stable or stable';
    END IF;
    v_node.stability := add_node.stability;
    IF add_node.decay_profile IS NULL
       OR add_node.decay_profile NOT IN ('permanent', 'slow', 'medium', 'fast', 'rapid') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'decay_profile must be permanent, slow, medium, fast or rapid';
    END IF;
    v_node.decay_profile := add_node.decay_profile;
    v_node.lifecycle_state := 'active';
    v_node.created_at := v_now;
    -- On a review schedule from the start, so that decay needs no date from the
    -- caller: one cadence of its stability ahead, unless a time is given, or
    -- 'infinity' (never due: no schedule, stored as NULL).
    IF add_node.next_review_at = 'infinity' THEN
        v_node.next_review_at := NULL;
    ELSE
        v_node.next_review_at := coalesce(
            prme._valid_timestamp('next_review_at', add_node.next_review_at),
            prme._plus_cadence(v_now, (prme._maintenance_setting(v_node.user_id, v_node.stability)).review_cadence)
        );
    END IF;
    v_node.updated_at := v_now;
    v_node.version := 1;

    v_entry := prme._journal_entry('create', NULL, gen_random_uuid(), NULL, NULL, NULL, v_node);
    v_node.last_checksum := v_entry.checksum;

    -- The search vector is computed here, once: content never changes afterwards.
    INSERT INTO prme.nodes (
        id, user_id, namespace, scope, kind, content, confidence_base, salience_base, reinforcement_boost,
        last_reinforced_at, evidence_refs, stability, next_review_at, lifecycle_state, decay_profile,
        created_at, updated_at, version, last_checksum, search
    ) VALUES (
        v_node.id, v_node.user_id, v_node.namespace, v_node.scope, v_node.kind, v_node.content,
        v_node.confidence_base, v_node.salience_base, v_node.reinforcement_boost, v_node.last_reinforced_at,
        v_node.evidence_refs, v_node.stability, v_node.next_review_at, v_node.lifecycle_state,
        v_node.decay_profile, v_node.created_at, v_node.updated_at, v_node.version, v_node.last_checksum,
        array_to_tsvector(prme._owner_lexemes(v_node.user_id, v_node.content))
    )
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR409', MESSAGE = 'a node with this node_id already exists';
    END IF;
    INSERT INTO prme.journal SELECT v_entry.*;
    IF v_embedding IS NOT NULL THEN
        INSERT INTO prme.node_embeddings (user_id, node_id, model_id, embedding)
        VALUES (v_node.user_id, v_node.id, add_node.embedding_model, v_embedding);
    END IF;
    RETURN prme._node_view(v_node, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.add_node(text, text, text, text, text, numeric, numeric, text, text, timestamptz, uuid, real[], text) IS
'Creates a memory for user_id and journals it as a create record. next_review_at defaults to now plus the review '
'cadence of its stability (the owner''s setting); ''infinity'' means no review schedule (stored as NULL). node_id '
'may be given (PR409 if taken); otherwise a random one is chosen. embedding, a vector of the content by the model '
'embedding_model (registered by its first vector), is stored beside the memory (not journaled). Invalid arguments '
'raise PR422.';

REVOKE ALL ON FUNCTION prme.add_node(text, text, text, text, text, numeric, numeric, text, text, timestamptz, uuid, real[], text) FROM public;
GRANT EXECUTE ON FUNCTION prme.add_node(text, text, text, text, text, numeric, numeric, text, text, timestamptz, uuid, real[], text) TO prme_app;

-- >>> sql/postgres/310_recall.sql

DROP FUNCTION prme.recall(text, text, text[], integer, timestamptz);

CREATE FUNCTION prme.recall(
    user_id text,
    query text DEFAULT NULL,
    scopes text[] DEFAULT NULL,
    max_count integer DEFAULT 10,
    as_of timestamptz DEFAULT now(),
    query_embedding real[] DEFAULT NULL,
    embedding_model text DEFAULT NULL
)
RETURNS TABLE (
    rank integer,
    score double precision,
    relevance double precision,
    effective_salience double precision,
    effective_confidence double precision,
    id uuid,
    namespace text,
    scope text,
    kind text,
    content text,
    lifecycle_state text,
    decay_profile text,
    confidence_base numeric,
    salience_base numeric,
    reinforcement_boost numeric,
    last_reinforced_at timestamptz,
    created_at timestamptz,
    updated_at timestamptz,
    version bigint
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(recall.user_id);
    v_scopes text[] := prme._valid_scopes(recall.scopes);
    v_as_of timestamptz := prme._valid_timestamp('as_of', coalesce(recall.as_of, now()));
    -- A model no memory has a vector of yet is not registered: nothing to compare, so words.
    v_embedding real[] := CASE
        WHEN recall.embedding_model IS NULL OR EXISTS (
            SELECT FROM prme.embedding_models AS m WHERE m.user_id = '*' AND m.model_id = recall.embedding_model
        ) THEN prme._valid_embedding(recall.embedding_model, recall.query_embedding)
    END;
    v_vectors text := prme._vector_schema();
    v_lexemes text[];
    v_nearest text;
    v_similarity text;
BEGIN
    IF recall.max_count IS NULL OR recall.max_count NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 1000';
    END IF;
    IF octet_length(recall.query) > 65536 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'query must be at most 65536 bytes',
            DETAIL = format('got %s bytes', octet_length(recall.query));
    END IF;

    IF recall.query IS NULL OR btrim(recall.query, E' \t\n\r\f\v') = '' THEN
        -- No query: every recallable memory of the owner matches; strength ranks alone.
        RETURN QUERY
        SELECT (row_number() OVER (ORDER BY r.score DESC, r.id))::integer, r.score, r.relevance,
            r.effective_salience, r.effective_confidence, r.id, r.namespace::text, r.scope::text, r.kind::text,
            r.content, r.lifecycle_state::text, r.decay_profile::text, r.confidence_base::numeric,
            r.salience_base::numeric, r.reinforcement_boost::numeric, r.last_reinforced_at, r.created_at,
            r.updated_at, r.version::bigint
        FROM (
            SELECT s.* FROM (
                SELECT d.*, d.relevance * (0.5 + 0.25 * d.effective_salience + 0.25 * d.effective_confidence) AS score
                FROM (
                    SELECT n.id, n.namespace, n.scope, n.kind, n.content, n.lifecycle_state, n.decay_profile,
                        n.confidence_base, n.salience_base, n.reinforcement_boost, n.last_reinforced_at,
                        n.created_at, n.updated_at, n.version, 1.0::double precision AS relevance,
                        prme._effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile,
                            prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                        ) AS effective_salience,
                        prme._effective_confidence(n.confidence_base, n.decay_profile,
                            prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                        ) AS effective_confidence
                    FROM prme.nodes AS n
                    WHERE n.user_id = v_user_id
                      AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                      AND (v_scopes IS NULL OR n.scope = ANY (v_scopes))
                    OFFSET 0  -- a level of its own: each effective value is computed once per row
                ) AS d
            ) AS s
            ORDER BY s.score DESC, s.id
            LIMIT recall.max_count
        ) AS r
        ORDER BY r.score DESC, r.id;
        RETURN;
    END IF;

    v_lexemes := prme._query_lexemes(v_user_id, recall.query);
    IF v_embedding IS NULL OR v_vectors IS NULL THEN
        IF cardinality(v_lexemes) = 0 THEN
            RETURN;  -- only stop words and punctuation, and no vector: nothing can match
        END IF;
        v_embedding := NULL;  -- lexical relevance alone
        -- No similarity: an empty "nearest" set, and no vector is read.
        v_nearest := 'nearest AS (SELECT NULL::uuid AS id WHERE FALSE),';
        v_similarity := 'similarity AS (SELECT NULL::uuid AS id, NULL::double precision AS cosine WHERE FALSE),';
    ELSE
        -- The nearest memories by inner product (vectors are unit length: the cosine),
        -- exact over the owner's vectors of the model, ties by id; then the similarity
        -- of every candidate. pgvector's operator is qualified with its schema.
        v_nearest := format(
            $sql$
            nearest AS MATERIALIZED (
                SELECT e.node_id AS id
                FROM (
                    SELECT v.node_id, v.embedding OPERATOR(%1$s.<#>) $6::%1$s.vector AS distance
                    FROM prme.node_embeddings AS v
                    WHERE v.user_id = $1 AND v.model_id = $5 AND v.embedding IS NOT NULL
                    ORDER BY distance, v.node_id
                ) AS e
                -- In distance order, each checked by its primary key until enough are found:
                -- the owner's rows are not read as a whole for the lifecycle and scope.
                CROSS JOIN LATERAL (
                    SELECT FROM prme.nodes AS n
                    WHERE n.user_id = $1 AND n.id = e.node_id
                      AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                      AND ($3 IS NULL OR n.scope = ANY ($3))
                ) AS recallable
                LIMIT greatest(100, $7)
            ),
            $sql$,
            v_vectors
        );
        v_similarity := format(
            $sql$
            similarity AS (
                SELECT c.id, -(e.embedding OPERATOR(%1$s.<#>) $6::%1$s.vector)::double precision AS cosine
                FROM candidates AS c
                CROSS JOIN LATERAL (
                    SELECT v.embedding FROM prme.node_embeddings AS v
                    WHERE v.user_id = $1 AND v.model_id = $5 AND v.node_id = c.id AND v.embedding IS NOT NULL
                ) AS e
            ),
            $sql$,
            v_vectors
        );
    END IF;

    -- The query's words carry the owner's key, so the GIN index on search finds this
    -- owner's matches alone; the owner test stays outside the inner level, as a recheck
    -- (two owners whose keys collided would share postings), so the planner does not
    -- also scan the owner's rows in the primary key to intersect them.
    RETURN QUERY EXECUTE format(
        $sql$
        WITH
        matched AS MATERIALIZED (
            SELECT m.id, m.search FROM (
                SELECT n.user_id, n.id, n.search
                FROM prme.nodes AS n
                WHERE n.search @@ prme._any_lexeme_query($2)
                  AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                  AND ($3 IS NULL OR n.scope = ANY ($3))
                OFFSET 0
            ) AS m
            WHERE m.user_id = $1
        ),
        %s
        candidates AS (
            SELECT matched.id FROM matched UNION SELECT nearest.id FROM nearest
        ),
        %s
        pairs AS (
            SELECT m.id, w.word
            FROM matched AS m, unnest(tsvector_to_array(m.search)) AS w (word)
            WHERE w.word = ANY ($2)
        ),
        -- BM25's idf of each of the query's words among the candidates (a word no
        -- candidate has weighs the most, and lowers every memory's share alike), in
        -- double precision as the pack computes it.
        weights AS (
            SELECT q.word,
                ln(1 + ((SELECT count(*) FROM candidates)::double precision - count(p.id) + 0.5) / (count(p.id) + 0.5))
                    AS weight
            FROM unnest($2) AS q (word)
            LEFT JOIN pairs AS p ON p.word = q.word
            GROUP BY q.word
        ),
        lexical AS (
            SELECT p.id, sum(w.weight) / (SELECT sum(a.weight) FROM weights AS a) AS share
            FROM pairs AS p JOIN weights AS w ON w.word = p.word
            GROUP BY p.id
        ),
        scored AS (
            SELECT c.id,
                CASE WHEN $6 IS NULL THEN coalesce(l.share, 0)
                     ELSE 0.6::double precision * coalesce(l.share, 0)
                          + 0.4::double precision * greatest(coalesce(s.cosine, 0), 0)
                END AS relevance
            FROM candidates AS c
            LEFT JOIN lexical AS l ON l.id = c.id
            LEFT JOIN similarity AS s ON s.id = c.id
        ),
        -- A score is between half its relevance and all of it (strength is in [0, 1]), so a
        -- candidate below half the max_count-th best relevance cannot be among the best:
        -- only the others have their rows read and their decay computed.
        contenders AS (
            SELECT sc.id, sc.relevance FROM scored AS sc
            WHERE sc.relevance >= 0.5 * coalesce(
                (SELECT b.relevance FROM scored AS b ORDER BY b.relevance DESC OFFSET $7 - 1 LIMIT 1), 0
            )
        )
        SELECT (row_number() OVER (ORDER BY r.score DESC, r.id))::integer, r.score, r.relevance,
            r.effective_salience, r.effective_confidence, r.id, r.namespace::text, r.scope::text, r.kind::text,
            r.content, r.lifecycle_state::text, r.decay_profile::text, r.confidence_base::numeric,
            r.salience_base::numeric, r.reinforcement_boost::numeric, r.last_reinforced_at, r.created_at,
            r.updated_at, r.version::bigint
        FROM (
            SELECT d.*, d.relevance * (0.5 + 0.25 * d.effective_salience + 0.25 * d.effective_confidence) AS score
            FROM (
                SELECT n.id, n.namespace, n.scope, n.kind, n.content, n.lifecycle_state, n.decay_profile,
                    n.confidence_base, n.salience_base, n.reinforcement_boost, n.last_reinforced_at,
                    n.created_at, n.updated_at, n.version, sc.relevance::double precision AS relevance,
                    prme._effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), $4)
                    ) AS effective_salience,
                    prme._effective_confidence(n.confidence_base, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), $4)
                    ) AS effective_confidence
                FROM contenders AS sc
                -- Each candidate by its primary key: a join would read all of the owner's rows.
                CROSS JOIN LATERAL (
                    SELECT m.* FROM prme.nodes AS m WHERE m.user_id = $1 AND m.id = sc.id
                ) AS n
                OFFSET 0  -- a level of its own: each effective value is computed once per row
            ) AS d
            ORDER BY score DESC, d.id
            LIMIT $7
        ) AS r
        ORDER BY r.score DESC, r.id
        $sql$,
        v_nearest, v_similarity
    ) USING v_user_id, v_lexemes, v_scopes, v_as_of, recall.embedding_model, v_embedding, recall.max_count;
END;
$$;

COMMENT ON FUNCTION prme.recall(text, text, text[], integer, timestamptz, real[], text) IS
'Recall over the memories of user_id, best first: relevance (the idf-weighted share of the query''s words the '
'memory has, fused 0.6/0.4 with the cosine similarity of query_embedding when it is given, of model '
'embedding_model, and the server has pgvector) times 0.5 + 0.25 * effective_salience + 0.25 * '
'effective_confidence at as_of (default now; NULL means now), ties by id. A NULL or blank query ranks every memory '
'by strength alone. scopes (NULL = all) filters; max_count is 1..1000; the query is at most 64 KiB with at most 1024 '
'distinct words. Archived and deprecated memories are excluded. Nothing is written. See docs/RECALL.md.';

REVOKE ALL ON FUNCTION prme.recall(text, text, text[], integer, timestamptz, real[], text) FROM public;
GRANT EXECUTE ON FUNCTION prme.recall(text, text, text[], integer, timestamptz, real[], text) TO prme_app;
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (22, 'recall_by_meaning', 'f7a5649f742e15965dadaa465e38dceaf74a4e52a07e740a38d7babfe3e4c131');

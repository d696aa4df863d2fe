-- Proposal (issue 31, backfill rate): store_embeddings' finiteness check without unnest.
-- NOT APPLIED: the lead decides (prme._valid_embedding has the same check, 256 components a
-- call: 9 us there, not worth changing).
--
-- Measured 2026-12-07 on the shared 2-core machine (load average 5.6 to 6.7), 10,000
-- memories of one owner, default model (wordllama 256), batches of 1,000, PostgreSQL 15:
--   embed_pending's split for 10,000 memories: embedding the texts 2.37 s, pending_embeddings
--   0.15 s, store_embeddings 3.08 s (2,195 memories/s end to end in bench/semantic_bench.py
--   at load 5.2; target >= 5,000/s).
--   The check over one batch's 256,000 components (psql, \timing, same session):
--     EXISTS (SELECT FROM unnest(embeddings) ... IN ('NaN', 'Infinity', '-Infinity'))   152 ms
--     @> ARRAY['NaN'] OR @> ARRAY['Infinity'] OR @> ARRAY['-Infinity'] OR array_position(NULL)  38 ms
--   so about 1.1 s of the 3.08 s store time for 10,000 memories goes away. Same answers:
--   ARRAY[1,'NaN',2]::real[] @> ARRAY['NaN'::real] is true; array_position(ARRAY[1,NULL]::real[], NULL) = 2.
-- The rest of the gap is the model itself on a loaded core (about 4,200 texts/s here): the
-- worker could embed batch n+1 while the server stores batch n (a second core).

CREATE OR REPLACE FUNCTION prme.store_embeddings(
    model_id text,
    user_ids text [],
    node_ids uuid [],
    embeddings real [],
    errors text [] DEFAULT NULL
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
    -- Array containment and array_position run in C over the array (NaN equals NaN in
    -- PostgreSQL's float order), instead of a row per component through unnest.
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


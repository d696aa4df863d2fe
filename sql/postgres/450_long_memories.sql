-- =============================================================================
-- prme-pg: long memories (add_node operations planned into parts)
--
-- An add_node or add_memory whose content has more tokens than its token_budget (payload
-- field, default 512) is executed in parts, across as many executor calls as it
-- takes, and still becomes one memory:
--   1. plan: the content is cut into parts of at most token_budget tokens with
--      the built-in tokenizer words_v1 (a token is a maximal run of characters
--      other than ASCII space, tab, LF, VT, FF, CR; whitespace belongs to the
--      token after it, trailing whitespace to the last part). Each part is stored
--      with its token range, its character range and the sha256 of its text.
--   2. validate: a part is validated by cutting its range out of the payload
--      again and checking the hash, the token count and that it is not empty.
--      At most max_parts parts are validated per executor call, each call
--      commits its progress, so a restarted executor reuses the stored plan and
--      skips the parts already validated.
--   3. commit: once every part is validated, the memory's content is assembled
--      from the validated parts (their concatenation must be the payload's
--      content) and prme.add_node creates the one memory, in the transaction
--      that marks the operation committed.
-- The token budget counts words, not model tokens: a model tokenizer (tiktoken)
-- needs code outside the database.
--
-- Each part carries its embedding state: pending until a vector by a model is stored
-- for it (embedded), or the model failed on it (failed). The model runs outside the
-- database: `prme-pg worker` embeds the pending parts of the operations in flight
-- (prme.pending_part_embeddings, prme.store_part_embeddings) before each executor
-- call, and its session names the model in the setting prme.part_embedding_model; an
-- executor with that setting validates only parts whose embedding is settled, so a
-- part is embedded before it is validated and a restarted worker embeds only what is
-- still pending. When every part has a vector by one model, the memory is created with
-- their normalised mean as its vector (docs/RECALL.md, "Long memories"). An executor
-- without the setting (pg_cron, psql) validates as before, and the memory gets its
-- vector from the embedding worker.
-- =============================================================================

CREATE TABLE prme.operation_parts (
    user_id text NOT NULL,
    operation_id text COLLATE "C" NOT NULL,
    part_no integer NOT NULL CHECK (part_no > 0),
    tokenizer text NOT NULL CHECK (tokenizer ~ '^[a-z][a-z0-9_:.-]{0,62}$'),
    token_start integer NOT NULL CHECK (token_start >= 0),
    token_end integer NOT NULL,
    char_start integer NOT NULL CHECK (char_start >= 0),
    char_end integer NOT NULL,
    sha256 text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    state text NOT NULL CHECK (state IN ('planned', 'validated')),
    planned_at timestamptz NOT NULL,
    validated_at timestamptz,
    embedding_state text NOT NULL DEFAULT 'pending'
    CONSTRAINT operation_parts_embedding_state_check CHECK (embedding_state IN ('pending', 'embedded', 'failed')),
    embedding_model text,
    embedding real[],
    embedding_error text CONSTRAINT operation_parts_embedding_error_check CHECK (octet_length(embedding_error) <= 2000),
    embedded_at timestamptz,
    PRIMARY KEY (user_id, operation_id, part_no),
    FOREIGN KEY (user_id, operation_id) REFERENCES prme.operations (user_id, operation_id),
    CHECK (token_end > token_start),
    CHECK (char_end > char_start),
    CHECK ((state = 'validated') = (validated_at IS NOT NULL)),
    CONSTRAINT operation_parts_embedding_settled CHECK (
        (embedding_state = 'pending') = (embedding_model IS NULL)
        AND (embedding_state = 'pending') = (embedded_at IS NULL)
        AND (embedding_state = 'embedded') = (embedding IS NOT NULL)
        AND (embedding_state = 'failed') = (embedding_error IS NOT NULL)
    )
);

-- The long memories in progress (an operation is left processing only between the
-- executor calls of a long memory): where prme.pending_part_embeddings looks, without
-- reading the ready backlog. A submit writes no entry (its row is accepted).
CREATE INDEX operations_processing ON prme.operations (next_attempt_at)
WHERE state = 'processing';

COMMENT ON TABLE prme.operation_parts IS
'The plan of a long add_node operation: one row per part with its token and character ranges (half-open, '
'0-based), the sha256 of its text, whether it is validated, and its embedding (pending, embedded with the '
'model''s vector, or failed with the error). Kept after the memory is committed.';

CREATE FUNCTION prme._word_count(content text)
RETURNS integer
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT count(*) FROM regexp_matches(content, E'[^\\t\\n\\v\\f\\r ]+', 'g'));
END;
$$;

COMMENT ON FUNCTION prme._word_count(text) IS
'Internal: the number of words_v1 tokens in content (maximal runs without ASCII whitespace).';

CREATE FUNCTION prme._plan_parts(content text, token_budget integer)
RETURNS TABLE (part_no integer, token_start integer, token_end integer, char_start integer, char_end integer)
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    WITH tokens AS (
        SELECT
            m.position::integer AS position,
            sum(length(m.match[1]) + length(m.match[2])) OVER (ORDER BY m.position)::integer AS end_char
        FROM regexp_matches(content, E'([\\t\\n\\v\\f\\r ]*)([^\\t\\n\\v\\f\\r ]+)', 'g') WITH ORDINALITY AS m (match, position)
    ),
    parts AS (
        SELECT
            ((t.position - 1) / token_budget)::integer + 1 AS part_no,
            min(t.position)::integer - 1 AS token_start,
            max(t.position)::integer AS token_end,
            max(t.end_char) AS end_char
        FROM tokens AS t
        GROUP BY 1
    )
    SELECT
        p.part_no,
        p.token_start,
        p.token_end,
        coalesce(lag(p.end_char) OVER (ORDER BY p.part_no), 0),
        CASE WHEN p.part_no = max(p.part_no) OVER () THEN length(content) ELSE p.end_char END
    FROM parts AS p
    ORDER BY p.part_no;
END;
$$;

COMMENT ON FUNCTION prme._plan_parts(text, integer) IS
'Internal: cuts content into parts of at most token_budget words_v1 tokens: token and character ranges '
'(half-open, 0-based) that cover the whole text in order.';

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

GRANT EXECUTE ON FUNCTION prme.operation_parts(text, text) TO prme_app;

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

REVOKE ALL ON FUNCTION prme.pending_part_embeddings(integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.pending_part_embeddings(integer) TO prme_app;

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

REVOKE ALL ON FUNCTION prme.store_part_embeddings(text, text[], text[], integer[], real[], text[]) FROM public;
GRANT EXECUTE ON FUNCTION prme.store_part_embeddings(text, text[], text[], integer[], real[], text[]) TO prme_app;
ALTER TABLE prme.operation_parts ENABLE ROW LEVEL SECURITY;

-- Readers: prme_reader the rows of the owners bound to it, prme_auditor every row
-- (015_reader_bindings.sql).
GRANT SELECT ON prme.operation_parts TO prme_reader, prme_auditor;
CREATE POLICY operation_parts_reader_owner ON prme.operation_parts FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY operation_parts_auditor_all ON prme.operation_parts FOR SELECT TO prme_auditor USING (TRUE);

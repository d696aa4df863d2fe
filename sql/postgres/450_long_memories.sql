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
-- needs code outside the database. Parts are where per-part work (embeddings,
-- summaries) would attach; today the work is validation.
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
    PRIMARY KEY (user_id, operation_id, part_no),
    FOREIGN KEY (user_id, operation_id) REFERENCES prme.operations (user_id, operation_id),
    CHECK (token_end > token_start),
    CHECK (char_end > char_start),
    CHECK ((state = 'validated') = (validated_at IS NOT NULL))
);

COMMENT ON TABLE prme.operation_parts IS
'The plan of a long add_node operation: one row per part with its token and character ranges (half-open, '
'0-based), the sha256 of its text and whether it is validated. Kept after the memory is committed.';

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

CREATE FUNCTION prme._long_memory_step(
    op prme.operations,
    content text,
    token_budget integer,
    parts_budget integer,
    OUT complete boolean,
    OUT content_out text,
    OUT parts integer,
    OUT parts_done integer,
    OUT parts_validated integer
)
RETURNS record
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_part prme.operation_parts;
    v_text text;
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

    -- 2. Validate the next parts, skipping those already validated.
    FOR v_part IN
        SELECT p.* FROM prme.operation_parts AS p
        WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id AND p.state = 'planned'
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

    -- 3. The memory is what the validated parts assemble to.
    SELECT string_agg(substr(content, p.char_start + 1, p.char_end - p.char_start), '' ORDER BY p.part_no)
    INTO content_out
    FROM prme.operation_parts AS p
    WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id AND p.state = 'validated';
    IF content_out IS DISTINCT FROM content THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'the validated parts do not assemble the content';
    END IF;
END;
$$;

COMMENT ON FUNCTION prme._long_memory_step(prme.operations, text, integer, integer) IS
'Internal: one executor step of a long add_node or add_memory: plans it into parts (once), validates up to parts_budget '
'parts, and once all are validated returns the content assembled from them (complete = true).';

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
    validated_at timestamptz
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
        p.planned_at, p.validated_at
    FROM prme.operation_parts AS p
    WHERE p.user_id = v_user_id AND p.operation_id = v_id
    ORDER BY p.part_no;
END;
$$;

COMMENT ON FUNCTION prme.operation_parts(text, text) IS
'The stored plan of a long add_node or add_memory operation of user_id: its parts in order, with token and character ranges, '
'hash and state. No rows for an operation that was not planned; PR404 for an unknown operation.';

GRANT EXECUTE ON FUNCTION prme.operation_parts(text, text) TO prme_app;
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

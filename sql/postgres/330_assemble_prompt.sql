-- =============================================================================
-- prme-pg: assemble_prompt (prompt text from current snapshot generations)
--
-- prme.assemble_prompt(user_id, scopes, budget_bytes) reads the current
-- generation of every requested scope in one statement (one complete generation
-- per scope, verified against its id) and lays their items out as text:
--
--   [personal]
--   - prefers tabs over spaces
--   - lives in Berlin
--
--   [work]
--   - deploys on Fridays are frozen
--
-- Scopes come in the order given (duplicates dropped), each scope's items in its
-- generation's order. A section is a "[scope]" line and one "- content" line per
-- item (a newline inside content continues on a line indented by two spaces);
-- sections are separated by one empty line. An item is taken when it still fits
-- in budget_bytes together with its section's header if it is the section's
-- first; otherwise it is skipped (truncated = true) and later, shorter items may
-- still fit. octet_length(prompt) <= budget_bytes always. See docs/SNAPSHOTS.md.
-- =============================================================================

CREATE FUNCTION prme.assemble_prompt(user_id text, scopes text[], budget_bytes integer)
RETURNS TABLE (
    prompt text,
    byte_size integer,
    item_count integer,
    truncated boolean,
    generation_scopes text[],
    generation_ids text[]
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(assemble_prompt.user_id);
    v_scopes text[] := prme._valid_scopes(assemble_prompt.scopes);
    v_generation record;
    v_doc json;
    v_content text;
    v_header text;
    v_line text;
    v_cost integer;
    v_section_open boolean;
    v_parts text[] := '{}'::text[];
    v_bytes integer := 0;
    v_items integer := 0;
    v_truncated boolean := FALSE;
    v_ids text[] := '{}'::text[];
BEGIN
    IF v_scopes IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'scopes must not be null';
    END IF;
    IF assemble_prompt.budget_bytes IS NULL OR assemble_prompt.budget_bytes NOT BETWEEN 1 AND 16777216 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'budget_bytes must be between 1 and 16777216';
    END IF;

    -- One statement reads every head and its generation: a concurrent publish is
    -- either entirely before it or entirely after it.
    FOR v_generation IN
        SELECT s.scope, g.generation_id, g.document
        FROM unnest(v_scopes) WITH ORDINALITY AS s (scope, position)
        LEFT JOIN prme.snapshot_heads AS h ON h.user_id = v_user_id AND h.scope = s.scope
        LEFT JOIN prme.snapshot_generations AS g
            ON g.user_id = h.user_id AND g.scope = h.scope AND g.generation_id = h.generation_id
        ORDER BY s.position
    LOOP
        v_ids := v_ids || v_generation.generation_id;
        CONTINUE WHEN v_generation.generation_id IS NULL;  -- never published: contributes nothing
        v_doc := prme._verified_document(v_user_id, v_generation.scope, v_generation.generation_id,
            v_generation.document);
        v_header := CASE WHEN v_bytes > 0 THEN E'\n' ELSE '' END || '[' || v_generation.scope || E']\n';
        v_section_open := FALSE;
        FOR v_content IN
            SELECT i.item ->> 'content'
            FROM json_array_elements(v_doc -> 'items') WITH ORDINALITY AS i (item, position)
            ORDER BY i.position
        LOOP
            v_line := '- ' || replace(v_content, E'\n', E'\n  ') || E'\n';
            v_cost := octet_length(v_line) + CASE WHEN v_section_open THEN 0 ELSE octet_length(v_header) END;
            IF v_bytes + v_cost <= assemble_prompt.budget_bytes THEN
                IF NOT v_section_open THEN
                    v_parts := v_parts || v_header;
                    v_section_open := TRUE;
                END IF;
                v_parts := v_parts || v_line;
                v_bytes := v_bytes + v_cost;
                v_items := v_items + 1;
            ELSE
                v_truncated := TRUE;
            END IF;
        END LOOP;
    END LOOP;

    prompt := array_to_string(v_parts, '');
    byte_size := octet_length(prompt);
    IF byte_size <> v_bytes OR byte_size > assemble_prompt.budget_bytes THEN
        RAISE EXCEPTION 'prme.assemble_prompt: byte accounting is off (% <> %)', byte_size, v_bytes;
    END IF;
    item_count := v_items;
    truncated := v_truncated;
    generation_scopes := v_scopes;
    generation_ids := v_ids;
    RETURN NEXT;
END;
$$;

COMMENT ON FUNCTION prme.assemble_prompt(text, text[], integer) IS
'Prompt text for user_id from the current snapshot generation of each of scopes (1..100, in the order given, '
'duplicates dropped), items in generation order, within budget_bytes (1..16777216; octet_length(prompt) never '
'exceeds it). Also returns the scopes and the generation id used for each (NULL: never published), and whether '
'an item did not fit (truncated). Each generation is verified against its id. See docs/SNAPSHOTS.md.';

REVOKE ALL ON FUNCTION prme.assemble_prompt(text, text[], integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.assemble_prompt(text, text[], integer) TO prme_app;

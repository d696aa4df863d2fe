-- prme-pg migration 0016_correction_phrases: the correction fixes of issue 18 item 3.
--   * prme.is_correction(message) answers false for "never mind", "don't worry" and a bare "no"
--     (no/nope/nah must be followed by more words), treats a line break as a clause boundary,
--     and also recognises the coding-guidance forms "use X instead", "prefer X to Y",
--     "favor/favour X over Y", "going forward, ..." and "from now on ..." (docs/MAINTENANCE.md,
--     the table of phrases).
--   * prme.link_correction counts a candidate listed twice once: the ids are made distinct (in
--     the order first listed) before anything, and the inbox keeps the distinct ids. Entries
--     written before keep their candidate arrays as they were.
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0016_correction_phrases.sql
-- (or prme-pg migrate). It replaces two functions: catalog locks only, each held for a moment;
-- no data is rewritten.
-- Its body is copied from sql/postgres/220_correction_linking.sql.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/220_correction_linking.sql

CREATE OR REPLACE FUNCTION prme.is_correction(message text)
RETURNS boolean
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text text;
    -- The start of the message, or of a line, sentence or clause within it.
    v_start constant text := E'(^|\n|[.!?;:,] ?)\\s*';
    -- The rest of a sentence: no line break, and no . ! ? ; ending one (a dot inside
    -- a word, as in os.path, does not end it).
    v_same_sentence constant text := E'(?:[^\n.!?;]|\\.\\S)*';
BEGIN
    -- Bounded like every message: the regular expressions below read it ten times.
    IF octet_length(message) > 65536 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'message must be at most 65536 bytes',
            DETAIL = format('got %s bytes', octet_length(message));
    END IF;
    -- Typographic apostrophes as ASCII, lower case; each line's runs of blanks as one
    -- space, lines joined by one line break (a line break is a clause boundary).
    v_text := (
        SELECT string_agg(btrim(regexp_replace(l.line, E'\\s+', ' ', 'g')), E'\n' ORDER BY l.n)
        FROM regexp_split_to_table(
            lower(translate(coalesce(message, ''), '’‘`', '''''''')), E'[\\n\\r\\u2028\\u2029]+'
        ) WITH ORDINALITY AS l (line, n)
    );
    RETURN
        -- "don't …", "do not …", "never …", "always …", "stop …", optionally after
        -- "please"; not "never mind", "don't worry", "do not worry"
        v_text ~ (
            v_start || E'(please )?(don''?t|do not|never|always|stop|quit)\\M(?! ?mind\\M)(?! worry\\M)'
        )
        -- "no, …", "nope. …", "no - …", "no" on a line of its own: followed by more words
        OR v_text ~ (v_start || E'(no|nope|nah)([,.!:;]+| -|\\n)\\s*[[:alnum:]]')
        -- "actually …" opening a sentence
        OR v_text ~ (v_start || E'(well,? )?actually\\M')
        -- "prefer X over Y", "prefer X instead of Y", "prefer X rather than Y", "prefer X
        -- to Y" (not "prefer to …"); "favor X over Y", "favour X over Y"
        OR v_text ~ (
            E'\\mprefers? (?!to\\M)\\S' || v_same_sentence || E'\\m(over|instead of|rather than|to)\\M'
        )
        OR v_text ~ (E'\\mfavou?rs? \\S' || v_same_sentence || E'\\mover\\M')
        -- "use X instead", "use X instead of Y"
        OR v_text ~ (E'\\muse \\S' || v_same_sentence || E'\\minstead\\M')
        -- "going forward, …", "from now on, …" / "from now on …" opening a clause
        OR v_text ~ (v_start || E'(going forward(,| -|:)|from now on(,| -|:)?) ?[[:alnum:]]')
        -- "you should never …", "I always …", "we never …"
        OR v_text ~ E'\\m(you|i|we)( should| must| will)? (never|always)\\M'
        -- "that's wrong", "that is not right", "this is incorrect"
        OR v_text ~ E'\\m(that|this|it)(''s| is| was) (wrong|incorrect|not (right|true|correct))\\M'
        -- "I said …", "I told you …" opening a sentence
        OR v_text ~ (v_start || E'i (already )?(said|told you)\\M');
END;
$$;

COMMENT ON FUNCTION prme.is_correction(text) IS
'True when a message uses explicit correction phrasing: "don''t …", "do not …", "no, …", "actually …", '
'"stop …", "never …"/"always …" (opening a line, sentence or clause, or after you/I/we), "prefer X over|to Y", '
'"favo(u)r X over Y", "use X instead", "going forward, …", "from now on …", "that''s wrong", "I told you …"; '
'not "never mind", "don''t worry" or a bare "no". A heuristic for routing messages to link_correction; it '
'reads nothing. See docs/MAINTENANCE.md for the table of phrases. PR422 for a message over 64 KiB.';

CREATE OR REPLACE FUNCTION prme.link_correction(
    user_id text,
    message text,
    candidate_node_ids uuid[],
    thread_id text DEFAULT NULL
)
RETURNS TABLE (status text, node_id uuid, outcome_id uuid, inbox_id uuid, matches jsonb)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(link_correction.user_id);
    v_message text := prme._valid_content(link_correction.message);
    v_thread_id text := prme._valid_ref('thread_id', link_correction.thread_id);
    v_candidates uuid[];
    v_tokens text[];
    v_token_set jsonb;
    v_candidate_bytes bigint;
    v_matched uuid[];
    v_node prme.nodes;
    v_outcome prme.outcomes;
    v_inbox_id uuid;
BEGIN
    IF link_correction.candidate_node_ids IS NULL
       OR cardinality(link_correction.candidate_node_ids) > 1000
       OR array_position(link_correction.candidate_node_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'candidate_node_ids must be an array of at most 1000 non-null ids';
    END IF;
    -- A candidate listed twice counts once: the distinct ids, in the order first listed.
    v_candidates := ARRAY(
        SELECT c.id
        FROM unnest(link_correction.candidate_node_ids) WITH ORDINALITY AS c (id, n)
        GROUP BY c.id
        ORDER BY min(c.n)
    );
    -- The work is tokenising the candidates: at most 1 MiB of their content per call
    -- (only the owner's active candidates count; others are ignored, as below).
    SELECT coalesce(sum(octet_length(n.content)), 0) INTO v_candidate_bytes
    FROM prme.nodes AS n
    WHERE n.user_id = v_user_id
      AND n.id = ANY(v_candidates)
      AND n.lifecycle_state = 'active';
    IF v_candidate_bytes > 1048576 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'the candidates'' content must be at most 1 MiB in all: pass fewer candidates',
            DETAIL = format('got %s bytes', v_candidate_bytes);
    END IF;
    v_tokens := prme._correction_tokens(v_message);
    -- The message's tokens as jsonb keys: each candidate token is one binary search.
    v_token_set := (SELECT jsonb_object_agg(t.token, TRUE) FROM unnest(v_tokens) AS t (token));

    -- Overlap of the message with every active candidate of this owner; the match
    -- test is exact integer arithmetic: 100 * shared >= 45 * smaller. OFFSET 0 keeps
    -- each level apart, so a candidate is tokenised once, not once per use.
    SELECT
        coalesce(array_agg(c.id ORDER BY c.shared::numeric / c.smaller DESC, c.id), '{}'),
        coalesce(jsonb_agg(
            jsonb_build_object('node_id', c.id, 'overlap', round(c.shared::numeric / c.smaller, 4))
            ORDER BY c.shared::numeric / c.smaller DESC, c.id
        ), '[]')
    INTO v_matched, matches
    FROM (
        SELECT
            n.id,
            (SELECT count(*) FROM unnest(t.tokens) AS x (token) WHERE v_token_set ? x.token) AS shared,
            least(cardinality(t.tokens), cardinality(v_tokens)) AS smaller
        FROM prme.nodes AS n
        CROSS JOIN LATERAL (SELECT prme._correction_tokens(n.content) AS tokens OFFSET 0) AS t
        WHERE n.user_id = v_user_id
          AND n.id = ANY(v_candidates)
          AND n.lifecycle_state = 'active'
        OFFSET 0
    ) AS c
    WHERE c.smaller > 0 AND 100 * c.shared >= 45 * c.smaller;

    IF cardinality(v_matched) = 1 THEN
        -- Share-lock the one match and re-check it under the lock (it may have been
        -- archived or contested since we read it).
        SELECT n.* INTO v_node
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id AND n.id = v_matched[1]
        FOR KEY SHARE;
        IF v_node.lifecycle_state = 'active' THEN
            v_outcome := prme._add_outcome(
                v_user_id, v_node.id, 'explicit_correction', NULL, NULL, v_thread_id, v_message, NULL,
                'link_correction', v_node.version, now()
            );
            status := 'linked';
            node_id := v_node.id;
            outcome_id := v_outcome.id;
            RETURN NEXT;
            RETURN;
        END IF;
        v_matched := '{}';
        matches := '[]';
    END IF;

    v_inbox_id := gen_random_uuid();
    INSERT INTO prme.correction_inbox (
        user_id, id, message, thread_id, candidate_node_ids, matched_node_ids, reason, created_at
    ) VALUES (
        v_user_id, v_inbox_id, v_message, v_thread_id, v_candidates, v_matched,
        CASE WHEN cardinality(v_matched) >= 2 THEN 'ambiguous' ELSE 'no_match' END, now()
    );
    status := CASE WHEN cardinality(v_matched) >= 2 THEN 'ambiguous' ELSE 'unmatched' END;
    inbox_id := v_inbox_id;
    RETURN NEXT;
END;
$$;

COMMENT ON FUNCTION prme.link_correction(text, text, uuid[], text) IS
'Links a correction message of user_id to the one candidate memory it overlaps (token overlap >= 0.45 over '
'active candidates; see docs/MAINTENANCE.md): status linked with the explicit_correction outcome appended, or '
'unmatched / ambiguous with the message put in the correction inbox and nothing appended. A candidate listed '
'twice counts once (the inbox keeps the distinct ids, in the order first listed). matches lists the '
'matching candidates with their overlap. PR422 for an empty message, more than 1000 candidates, or active '
'candidates holding more than 1 MiB of content in all.';
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (16, 'correction_phrases', '5b851fec7cac6d2f8c36bacae739e2c81db625df242f1dd54ae5acbd43b85764');

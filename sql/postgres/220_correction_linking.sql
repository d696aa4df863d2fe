-- =============================================================================
-- prme-pg: correction linking
--
-- An owner's message that corrects a memory ("no, I use spaces now") must count
-- against the memory it corrects, and only that one. link_correction compares the
-- message with candidate memories (typically what recall just showed) by token
-- overlap:
--   tokens   lower-cased runs of [a-z0-9] longer than 3 characters (a set);
--   overlap  |A ∩ B| / min(|A|, |B|), 0 when either set is empty;
--   match    overlap >= 0.45, among the candidates that are active memories of
--            the owner (others are ignored, never revealed).
-- Exactly one match appends an explicit_correction outcome to it. Zero or several
-- put the message in prme.correction_inbox for the owner to resolve, and append
-- nothing: a correction is never guessed onto a memory.
-- is_correction(message) spots explicit correction phrasing. See docs/MAINTENANCE.md.
-- =============================================================================

CREATE TABLE prme.correction_inbox (
    user_id text NOT NULL,
    id uuid NOT NULL,
    message text NOT NULL,
    thread_id text CHECK (length(thread_id) BETWEEN 1 AND 256),
    candidate_node_ids uuid[] NOT NULL,
    matched_node_ids uuid[] NOT NULL,
    reason text NOT NULL CHECK (reason IN ('no_match', 'ambiguous')),
    created_at timestamptz NOT NULL,
    resolution text CHECK (resolution IN ('linked', 'dismissed')),
    resolved_node_id uuid,
    outcome_id uuid,
    resolved_at timestamptz,
    PRIMARY KEY (user_id, id),
    FOREIGN KEY (user_id, resolved_node_id) REFERENCES prme.nodes (user_id, id),
    FOREIGN KEY (user_id, outcome_id) REFERENCES prme.outcomes (user_id, id),
    CHECK ((reason = 'ambiguous') = (cardinality(matched_node_ids) >= 2)),
    CHECK (
        (resolution IS NULL AND resolved_at IS NULL AND resolved_node_id IS NULL AND outcome_id IS NULL)
        OR (resolution = 'dismissed' AND resolved_at IS NOT NULL AND resolved_node_id IS NULL AND outcome_id IS NULL)
        OR (
            resolution = 'linked' AND resolved_at IS NOT NULL AND resolved_node_id IS NOT NULL
            AND outcome_id IS NOT NULL
        )
    )
);

COMMENT ON TABLE prme.correction_inbox IS
'Correction messages that matched no candidate memory or several: kept for the owner to link '
'(prme.resolve_correction) or dismiss. Nothing is counted against a memory until then.';

CREATE INDEX correction_inbox_open_idx ON prme.correction_inbox (user_id, created_at)
WHERE resolution IS NULL;

-- Readers: prme_reader the rows of the owners bound to it, prme_auditor every row
-- (015_reader_bindings.sql).
ALTER TABLE prme.correction_inbox ENABLE ROW LEVEL SECURITY;
GRANT SELECT ON prme.correction_inbox TO prme_reader, prme_auditor;
CREATE POLICY correction_inbox_reader_owner ON prme.correction_inbox FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY correction_inbox_auditor_all ON prme.correction_inbox FOR SELECT TO prme_auditor USING (TRUE);

CREATE FUNCTION prme._correction_tokens(message text)
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Runs are cut on the ASCII classes first and lower-cased after, so no
    -- locale can turn another character into [a-z] (U+212A KELVIN SIGN lowers to k).
    RETURN ARRAY(
        SELECT DISTINCT lower(t.token)
        FROM regexp_split_to_table(message, '[^A-Za-z0-9]+') AS t (token)
        WHERE length(t.token) > 3
        ORDER BY 1
    );
END;
$$;

COMMENT ON FUNCTION prme._correction_tokens(text) IS
'Internal: the token set of a text for correction linking: distinct lower-cased runs of [a-z0-9] longer than '
'3 characters, sorted.';

CREATE FUNCTION prme._token_overlap(a text[], b text[])
RETURNS numeric
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_smaller integer := least(coalesce(cardinality(a), 0), coalesce(cardinality(b), 0));
BEGIN
    IF v_smaller = 0 THEN
        RETURN 0;
    END IF;
    RETURN (SELECT count(*) FROM unnest(a) AS x (token) WHERE x.token = ANY(b))::numeric / v_smaller;
END;
$$;

COMMENT ON FUNCTION prme._token_overlap(text[], text[]) IS
'Internal: |A ∩ B| / min(|A|, |B|) of two token sets (0 when either is empty). Matching compares exactly: '
'100 * |A ∩ B| >= 45 * min(|A|, |B|).';

CREATE FUNCTION prme.is_correction(message text)
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

CREATE FUNCTION prme.link_correction(
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

CREATE FUNCTION prme.list_correction_inbox(
    user_id text,
    include_resolved boolean DEFAULT FALSE,
    max_count integer DEFAULT 100
)
RETURNS SETOF prme.correction_inbox
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(list_correction_inbox.user_id);
BEGIN
    IF list_correction_inbox.max_count IS NULL OR list_correction_inbox.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    RETURN QUERY
    SELECT i.*
    FROM prme.correction_inbox AS i
    WHERE i.user_id = v_user_id
      AND (i.resolution IS NULL OR coalesce(list_correction_inbox.include_resolved, FALSE))
    ORDER BY i.created_at, i.id
    LIMIT list_correction_inbox.max_count;
END;
$$;

COMMENT ON FUNCTION prme.list_correction_inbox(text, boolean, integer) IS
'The correction inbox of user_id, oldest first: open entries, or all with include_resolved. max_count is 1..10000.';

CREATE FUNCTION prme.resolve_correction(user_id text, inbox_id uuid, node_id uuid DEFAULT NULL)
RETURNS prme.correction_inbox
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(resolve_correction.user_id);
    v_entry prme.correction_inbox;
    v_node prme.nodes;
    v_outcome prme.outcomes;
BEGIN
    IF resolve_correction.inbox_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'inbox_id must not be null';
    END IF;
    SELECT i.* INTO v_entry
    FROM prme.correction_inbox AS i
    WHERE i.user_id = v_user_id AND i.id = resolve_correction.inbox_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'inbox entry not found';
    END IF;

    -- Resolving again the same way is a no-op that returns the entry; any other
    -- resolution of a resolved entry is a conflict.
    IF v_entry.resolution IS NOT NULL THEN
        IF v_entry.resolved_node_id IS NOT DISTINCT FROM resolve_correction.node_id THEN
            RETURN v_entry;
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = 'PR409',
            MESSAGE = 'inbox entry was already resolved otherwise',
            DETAIL = format('resolution %s', v_entry.resolution);
    END IF;

    IF resolve_correction.node_id IS NOT NULL THEN
        SELECT n.* INTO v_node
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id AND n.id = resolve_correction.node_id
        FOR KEY SHARE;
        IF NOT FOUND OR v_node.lifecycle_state = 'archived' THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
        END IF;
        v_outcome := prme._add_outcome(
            v_user_id, v_node.id, 'explicit_correction', NULL, NULL, v_entry.thread_id, v_entry.message, NULL,
            'resolve_correction', v_node.version, now()
        );
        v_entry.resolution := 'linked';
        v_entry.resolved_node_id := v_node.id;
        v_entry.outcome_id := v_outcome.id;
    ELSE
        v_entry.resolution := 'dismissed';
    END IF;
    v_entry.resolved_at := now();

    UPDATE prme.correction_inbox AS i SET
        resolution = v_entry.resolution,
        resolved_node_id = v_entry.resolved_node_id,
        outcome_id = v_entry.outcome_id,
        resolved_at = v_entry.resolved_at
    WHERE i.user_id = v_user_id AND i.id = v_entry.id;
    RETURN v_entry;
END;
$$;

COMMENT ON FUNCTION prme.resolve_correction(text, uuid, uuid) IS
'Resolves a correction inbox entry of user_id: with node_id, appends the explicit_correction outcome to that '
'memory (any non-archived memory of the owner, else PR404) and marks the entry linked; without, dismisses it. '
'Repeating the same resolution returns the entry unchanged; a different one raises PR409.';

REVOKE ALL ON FUNCTION prme.is_correction(text) FROM public;
GRANT EXECUTE ON FUNCTION prme.is_correction(text) TO prme_app;
REVOKE ALL ON FUNCTION prme.link_correction(text, text, uuid[], text) FROM public;
GRANT EXECUTE ON FUNCTION prme.link_correction(text, text, uuid[], text) TO prme_app;
REVOKE ALL ON FUNCTION prme.list_correction_inbox(text, boolean, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.list_correction_inbox(text, boolean, integer) TO prme_app;
REVOKE ALL ON FUNCTION prme.resolve_correction(text, uuid, uuid) FROM public;
GRANT EXECUTE ON FUNCTION prme.resolve_correction(text, uuid, uuid) TO prme_app;

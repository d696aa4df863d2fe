-- prme-pg migration 0011_hostile_callers: the API holds up against callers who set what they
-- like or send much.
--   * prme_reader no longer reads the owner named in the prme.user_id setting, which any session
--     may set: it reads the owners bound to the reading role in the new prme.reader_bindings
--     (none until a DBA binds some), and the new role prme_auditor reads every owner
--     (docs/SECURITY.md).
--   * verify_journal reports, and journal_records exports, journal records whose node row is gone
--     (node_missing), which both missed because they started from prme.nodes.
--   * API functions no longer depend on the caller's standard_conforming_strings (E'' literals).
--   * Calls whose work grew with their arguments are bounded, PR422 beyond (docs/SECURITY.md,
--     "Limits"): link_correction's candidates hold at most 1 MiB of content, is_correction's
--     message at most 64 KiB, a recall or find_nodes query at most 1024 distinct lexemes (and
--     find_nodes' lists 100 entries), apply_patch at most 10000 op ids, canonical_json and
--     payload_hash at most 1 MiB.
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0011_hostile_callers.sql
-- (or prme-pg migrate). Run it as a superuser or a role with CREATEROLE (it creates prme_auditor
-- when missing). It replaces functions and policies and adds one empty table: catalog locks only,
-- each held for a moment.

-- >>> sql/postgres/010_roles_and_schema.sql: the all-owners reader; roles are cluster-wide, so it
-- is created by the migrating role, before SET LOCAL ROLE

DO $roles$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'prme_auditor') THEN
        BEGIN
            CREATE ROLE prme_auditor NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- created concurrently by a migration in another database
        END;
    END IF;
END
$roles$;

SET LOCAL ROLE prme_owner;

GRANT USAGE ON SCHEMA prme TO prme_auditor;

-- >>> sql/postgres/135_security.sql: readers are bound to owners by role

-- Written by the DBA (prme_owner or a superuser); a reader sees its own bindings.
CREATE TABLE prme.reader_bindings (
    user_id text NOT NULL,
    reader regrole NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, reader)
);

COMMENT ON TABLE prme.reader_bindings IS
'Which owners prme_reader shows to which role: a role with the privileges of reader (pg_has_role USAGE) reads '
'user_id''s rows. regrole: checked on insert, kept across renames; a dropped role matches nobody.';

GRANT SELECT ON prme.reader_bindings TO prme_reader, prme_auditor;
ALTER TABLE prme.reader_bindings ENABLE ROW LEVEL SECURITY;
CREATE POLICY reader_bindings_reader_own ON prme.reader_bindings FOR SELECT TO prme_reader
USING (pg_has_role(reader, 'USAGE'));
CREATE POLICY reader_bindings_auditor_all ON prme.reader_bindings FOR SELECT TO prme_auditor
USING (TRUE);

GRANT SELECT ON prme.nodes, prme.events, prme.journal TO prme_auditor;

-- >>> sql/postgres/135_security.sql and 500_reader_access.sql: prme_reader's policies read the
-- bindings, not prme.user_id; prme_auditor reads every owner's rows

GRANT SELECT ON
prme.outcomes,
prme.node_maintenance,
prme.correction_inbox,
prme.maintenance_settings,
prme.maintenance_patches,
prme.patch_ops,
prme.snapshot_generations,
prme.snapshot_heads,
prme.snapshot_history,
prme.operations,
prme.operation_events,
prme.operation_parts
TO prme_auditor;

ALTER POLICY nodes_reader_owner ON prme.nodes
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY events_reader_owner ON prme.events
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY journal_reader_owner ON prme.journal
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY outcomes_reader_owner ON prme.outcomes
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY node_maintenance_reader_owner ON prme.node_maintenance
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY correction_inbox_reader_owner ON prme.correction_inbox
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY maintenance_settings_reader_owner ON prme.maintenance_settings
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY maintenance_patches_reader_owner ON prme.maintenance_patches
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY patch_ops_reader_owner ON prme.patch_ops
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY snapshot_generations_reader_owner ON prme.snapshot_generations
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY snapshot_heads_reader_owner ON prme.snapshot_heads
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY snapshot_history_reader_owner ON prme.snapshot_history
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY operations_reader_owner ON prme.operations
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY operation_events_reader_owner ON prme.operation_events
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
ALTER POLICY operation_parts_reader_owner ON prme.operation_parts
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);

CREATE POLICY nodes_auditor_all ON prme.nodes FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY events_auditor_all ON prme.events FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY journal_auditor_all ON prme.journal FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY outcomes_auditor_all ON prme.outcomes FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY node_maintenance_auditor_all ON prme.node_maintenance FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY correction_inbox_auditor_all ON prme.correction_inbox FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY maintenance_settings_auditor_all ON prme.maintenance_settings FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY maintenance_patches_auditor_all ON prme.maintenance_patches FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY patch_ops_auditor_all ON prme.patch_ops FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY snapshot_generations_auditor_all ON prme.snapshot_generations FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY snapshot_heads_auditor_all ON prme.snapshot_heads FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY snapshot_history_auditor_all ON prme.snapshot_history FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY operations_auditor_all ON prme.operations FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY operation_events_auditor_all ON prme.operation_events FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY operation_parts_auditor_all ON prme.operation_parts FOR SELECT TO prme_auditor USING (TRUE);

-- >>> sql/postgres/060_journal.sql: journal records without their node are reported and
-- exported

CREATE OR REPLACE FUNCTION prme.verify_journal(user_id text)
RETURNS TABLE (node_id uuid, node_version bigint, problem text, detail text)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(verify_journal.user_id);
    v_entry prme.journal;
    v_doc jsonb;
    v_node_id uuid;
    v_expected_version bigint;
    v_prev_checksum text;
    v_prev_after jsonb;
BEGIN
    FOR v_entry IN
        SELECT j.* FROM prme.journal AS j
        WHERE j.user_id = v_user_id
        ORDER BY j.node_id, j.node_version
    LOOP
        IF v_entry.node_id IS DISTINCT FROM v_node_id THEN
            v_node_id := v_entry.node_id;
            v_expected_version := 1;
            v_prev_checksum := NULL;
            v_prev_after := NULL;
        END IF;
        node_id := v_entry.node_id;
        node_version := v_entry.node_version;

        IF prme._sha256_hex(v_entry.record) <> v_entry.checksum THEN
            problem := 'checksum_mismatch';
            detail := 'sha256 of the stored record text differs from the stored checksum';
            RETURN NEXT;
        END IF;

        v_doc := prme._parse_record(v_entry.record);
        IF v_doc IS NULL OR jsonb_typeof(v_doc) <> 'object' THEN
            problem := 'malformed_record';
            detail := 'the stored record text is not a JSON object';
            RETURN NEXT;
        ELSE
            IF v_doc ->> 'node_id' IS DISTINCT FROM v_entry.node_id::text
               OR v_doc ->> 'user_id' IS DISTINCT FROM v_entry.user_id
               OR v_doc ->> 'op' IS DISTINCT FROM v_entry.op
               OR v_doc ->> 'version' IS DISTINCT FROM v_entry.record_version::text
               OR v_doc ->> 'operation_id' IS DISTINCT FROM v_entry.operation_id::text
               OR v_doc ->> 'evidence_id' IS DISTINCT FROM v_entry.evidence_id::text
               OR v_doc -> 'after' ->> 'version' IS DISTINCT FROM v_entry.node_version::text
               OR (v_entry.record_version = 2 AND (
                   v_doc ->> 'request_id' IS DISTINCT FROM v_entry.request_id::text
                   OR v_doc ->> 'prev_checksum' IS DISTINCT FROM v_entry.prev_checksum))
            THEN
                problem := 'column_mismatch';
                detail := 'a column of the journal row disagrees with its record';
                RETURN NEXT;
            END IF;
            IF (v_doc -> 'before') IS DISTINCT FROM coalesce(v_prev_after, 'null'::jsonb) THEN
                problem := 'continuity_break';
                detail := 'before differs from the after of the previous record of this node';
                RETURN NEXT;
            END IF;
            v_prev_after := v_doc -> 'after';
        END IF;

        IF v_entry.node_version <> v_expected_version THEN
            problem := 'version_gap';
            detail := format('expected node version %s', v_expected_version);
            RETURN NEXT;
        END IF;
        IF v_entry.record_version = 2 AND v_entry.prev_checksum IS DISTINCT FROM v_prev_checksum THEN
            problem := 'chain_break';
            detail := format('prev_checksum %s does not name the previous record %s',
                coalesce(v_entry.prev_checksum, 'null'), coalesce(v_prev_checksum, 'null'));
            RETURN NEXT;
        END IF;
        v_expected_version := v_entry.node_version + 1;
        v_prev_checksum := v_entry.checksum;
    END LOOP;

    -- The head of each chain must be the record the node row points at; this
    -- catches a deleted newest record, which no later link would reveal.
    RETURN QUERY
    SELECT n.id, n.version, 'head_mismatch'::text,
        format('node points at %s, newest record is %s', n.last_checksum, coalesce(h.checksum, 'missing'))
    FROM prme.nodes AS n
    LEFT JOIN LATERAL (
        SELECT j.checksum, j.node_version FROM prme.journal AS j
        WHERE j.user_id = n.user_id AND j.node_id = n.id
        ORDER BY j.node_version DESC
        LIMIT 1
    ) AS h ON TRUE
    WHERE n.user_id = v_user_id
      AND (h.checksum IS DISTINCT FROM n.last_checksum OR h.node_version IS DISTINCT FROM n.version);

    -- Records whose node row is gone: their chain may still verify, so only the
    -- missing row shows that a node was deleted. Reported at the newest record.
    RETURN QUERY
    SELECT j.node_id, max(j.node_version), 'node_missing'::text,
        format('no node row for its %s journal record(s)', count(*))
    FROM prme.journal AS j
    WHERE j.user_id = v_user_id
      AND NOT EXISTS (SELECT FROM prme.nodes AS n WHERE n.user_id = j.user_id AND n.id = j.node_id)
    GROUP BY j.node_id
    ORDER BY j.node_id;
END;
$$;

COMMENT ON FUNCTION prme.verify_journal(text) IS
'Checks every journal record of one owner: checksum over the stored text, columns against the record, '
'version sequence, hash chain (v2), before/after continuity, that each node points at its newest record, and '
'that every chain has its node. Returns one row per problem; no rows means the journal verifies.';

-- >>> sql/postgres/160_journal_records.sql: journal records without their node are reported and
-- exported

CREATE OR REPLACE FUNCTION prme.journal_records(user_id text)
RETURNS TABLE (
    node_id uuid,
    version bigint,
    last_checksum text,
    node_version bigint,
    record_version smallint,
    op text,
    operation_id uuid,
    request_id uuid,
    evidence_id uuid,
    record text,
    checksum text,
    prev_checksum text
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(journal_records.user_id);
BEGIN
    -- One row per record; a node without records appears once with NULL record
    -- columns, a record without its node with NULL node columns (version, last_checksum).
    RETURN QUERY
    SELECT n.id, n.version, n.last_checksum, j.node_version, j.record_version, j.op, j.operation_id,
        j.request_id, j.evidence_id, j.record, j.checksum, j.prev_checksum
    FROM prme.nodes AS n
    LEFT JOIN prme.journal AS j ON j.user_id = n.user_id AND j.node_id = n.id
    WHERE n.user_id = v_user_id
    UNION ALL
    SELECT j.node_id, NULL, NULL, j.node_version, j.record_version, j.op, j.operation_id,
        j.request_id, j.evidence_id, j.record, j.checksum, j.prev_checksum
    FROM prme.journal AS j
    WHERE j.user_id = v_user_id
      AND NOT EXISTS (SELECT FROM prme.nodes AS n WHERE n.user_id = j.user_id AND n.id = j.node_id)
    ORDER BY 1, 4;
END;
$$;

COMMENT ON FUNCTION prme.journal_records(text) IS
'Every journal record of user_id with its node''s head (version, last_checksum), in chain order, for '
'verification outside the database. Nodes without records appear once with NULL record columns, records '
'without their node with NULL version and last_checksum.';

-- >>> sql/postgres/030_validation.sql: no literal depends on standard_conforming_strings

CREATE OR REPLACE FUNCTION prme._valid_user_id(user_id text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Control characters are Unicode's Cc set, U+0000-U+001F and U+007F-U+009F, spelt
    -- out: [[:cntrl:]] depends on the database locale.
    IF user_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'user_id must not be null';
    END IF;
    IF length(user_id) NOT BETWEEN 1 AND 256 OR user_id ~ E'[\\x01-\\x1f\\x7f-\\x9f]' OR user_id <> btrim(user_id) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'user_id must be 1 to 256 characters without control characters or surrounding spaces';
    END IF;
    RETURN user_id;
END;
$$;

COMMENT ON FUNCTION prme._valid_user_id(text) IS
'Internal: returns user_id, or raises PR422 when it is null, empty, longer than 256 characters, '
'or has control characters or surrounding spaces.';

-- >>> sql/postgres/140_api_tokens.sql: no literal depends on standard_conforming_strings

CREATE OR REPLACE FUNCTION prme.create_api_token(user_id text, token_sha256 text, label text DEFAULT '')
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_created_at timestamptz;
BEGIN
    IF create_api_token.label IS NULL OR length(create_api_token.label) > 200
       OR create_api_token.label ~ E'[\\x01-\\x1f\\x7f-\\x9f]' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'label must be at most 200 characters, no control characters';
    END IF;
    INSERT INTO prme.api_tokens (user_id, token_sha256, label)
    VALUES (
        prme._valid_user_id(create_api_token.user_id),
        prme._valid_token_sha256(create_api_token.token_sha256),
        create_api_token.label
    )
    ON CONFLICT DO NOTHING
    RETURNING created_at INTO v_created_at;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR409', MESSAGE = 'this token is already registered';
    END IF;
    RETURN v_created_at;
END;
$$;

COMMENT ON FUNCTION prme.create_api_token(text, text, text) IS
'Registers the sha256 of a new bearer token for user_id (the caller generated the token and shows it once). '
'Returns its creation time; PR409 if that hash is already registered.';

-- >>> sql/postgres/210_outcomes.sql: no literal depends on standard_conforming_strings

CREATE OR REPLACE FUNCTION prme._valid_ref(argument text, value text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- An explicit control-character set (C0, DEL, C1): [[:cntrl:]] depends on the locale.
    IF value IS NOT NULL
       AND (length(value) NOT BETWEEN 1 AND 256 OR value ~ E'[\\x01-\\x1f\\x7f-\\x9f]' OR value <> btrim(value)) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('%s must be 1 to 256 characters without control characters or surrounding spaces',
                argument);
    END IF;
    RETURN value;
END;
$$;

COMMENT ON FUNCTION prme._valid_ref(text, text) IS
'Internal: returns value (NULL allowed) when it is a valid external reference such as profile_id or thread_id '
'(1 to 256 characters, no control characters or surrounding spaces), else raises PR422.';

-- >>> sql/postgres/220_correction_linking.sql: E'' literals; is_correction takes at most 64
-- KiB; link_correction compares at most 1 MiB of candidate content, tokenising each candidate
-- once, in time linear in the tokens

CREATE OR REPLACE FUNCTION prme.is_correction(message text)
RETURNS boolean
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text text;
    -- The start of the message, or of a sentence or clause within it.
    v_start constant text := E'(^|[.!?;:,] ?)\\s*';
BEGIN
    -- Bounded like every message: the regular expressions below read it seven times.
    IF octet_length(message) > 65536 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'message must be at most 65536 bytes',
            DETAIL = format('got %s bytes', octet_length(message));
    END IF;
    -- Typographic apostrophes as ASCII, runs of blanks as one space, lower case.
    v_text := lower(regexp_replace(translate(coalesce(message, ''), '’‘`', ''''''''), E'\\s+', ' ', 'g'));
    RETURN
        -- "don't …", "do not …", "never …", "always …", "stop …", optionally after "please"
        v_text ~ (v_start || E'(please )?(don''?t|do not|never|always|stop|quit)\\M')
        -- "no, …", "nope. …", "no - …"
        OR v_text ~ (v_start || '(no|nope|nah)([,.!:;]| -)')
        -- "actually …" opening a sentence
        OR v_text ~ (v_start || E'(well,? )?actually\\M')
        -- "prefer X over Y", "prefer X instead of Y", "prefer X rather than Y"
        OR v_text ~ E'\\mprefers? \\S.*\\m(over|instead of|rather than)\\M'
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
'"stop …", "prefer X over Y", "never …"/"always …" (opening a sentence, or after you/I/we), "that''s wrong", '
'"I told you …". A heuristic for routing messages to link_correction; it reads nothing. PR422 for a message over '
'64 KiB.';

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
    -- The work is tokenising the candidates: at most 1 MiB of their content per call
    -- (only the owner's active candidates count; others are ignored, as below).
    SELECT coalesce(sum(octet_length(n.content)), 0) INTO v_candidate_bytes
    FROM prme.nodes AS n
    WHERE n.user_id = v_user_id
      AND n.id = ANY(link_correction.candidate_node_ids)
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
          AND n.id = ANY(link_correction.candidate_node_ids)
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
        v_user_id, v_inbox_id, v_message, v_thread_id, link_correction.candidate_node_ids, v_matched,
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
'unmatched / ambiguous with the message put in the correction inbox and nothing appended. matches lists the '
'matching candidates with their overlap. PR422 for an empty message, more than 1000 candidates, or active '
'candidates holding more than 1 MiB of content in all.';

-- >>> sql/postgres/260_patches.sql: apply_patch takes at most 10000 op ids and looks each up,
-- instead of testing every op of the patch against every id

CREATE OR REPLACE FUNCTION prme.apply_patch(
    user_id text,
    patch_id uuid,
    op_ids text[] DEFAULT NULL,
    mode text DEFAULT 'manual'
)
RETURNS TABLE (op_id text, op text, node_id uuid, status text, detail text, node_version bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(apply_patch.user_id);
    v_ids text[];
    v_missing text[];
    v_op_nos integer[];
    v_op prme.patch_ops;
    v_result record;
BEGIN
    IF apply_patch.patch_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'patch_id must not be null';
    END IF;
    IF apply_patch.mode IS NULL OR apply_patch.mode NOT IN ('manual', 'auto') THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'mode must be manual or auto';
    END IF;
    IF apply_patch.mode = 'manual' THEN
        IF apply_patch.op_ids IS NULL OR array_position(apply_patch.op_ids, NULL) IS NOT NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422', MESSAGE = 'manual mode applies the selected ops: op_ids must list them';
        END IF;
        IF cardinality(apply_patch.op_ids) > 10000
           OR (SELECT max(length(x.id)) FROM unnest(apply_patch.op_ids) AS x (id)) > 64 THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422', MESSAGE = 'op_ids must list at most 10000 op ids of at most 64 characters';
        END IF;
        v_ids := ARRAY(SELECT DISTINCT x.id FROM unnest(apply_patch.op_ids) AS x (id));
    ELSIF apply_patch.op_ids IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'auto mode chooses its ops: op_ids must be null';
    END IF;

    PERFORM FROM prme.maintenance_patches AS p WHERE p.user_id = v_user_id AND p.id = apply_patch.patch_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'patch not found';
    END IF;
    -- The chosen ops by number: a manual selection looks each listed id up (so the
    -- work grows with the ids given, not with their product with the patch's ops).
    IF apply_patch.mode = 'manual' THEN
        SELECT
            array_agg(x.id ORDER BY x.id) FILTER (WHERE o.op_no IS NULL),
            array_agg(o.op_no) FILTER (WHERE o.op_no IS NOT NULL)
        INTO v_missing, v_op_nos
        FROM unnest(v_ids) AS x (id)
        LEFT JOIN prme.patch_ops AS o
            ON o.user_id = v_user_id AND o.patch_id = apply_patch.patch_id AND o.op_id = x.id;
        IF v_missing IS NOT NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR404', MESSAGE = 'operation not found in this patch',
                DETAIL = format('unknown op_ids: %s%s', array_to_string(v_missing[1:20], ', '),
                    CASE WHEN cardinality(v_missing) > 20 THEN format(' and %s more', cardinality(v_missing) - 20) END);
        END IF;
    ELSE
        v_op_nos := ARRAY(
            SELECT o.op_no FROM prme.patch_ops AS o
            WHERE o.user_id = v_user_id AND o.patch_id = apply_patch.patch_id
              AND (o.op = 'decay_confidence' OR (o.recommendation = 'increase_stability' AND NOT o.requires_review))
        );
    END IF;

    -- Lock the chosen ops in op order (which is memory order, so concurrent applies
    -- of overlapping patches lock memories in the same order). A second apply of
    -- the same ops waits here and then sees them applied.
    FOR v_op IN
        SELECT o.*
        FROM prme.patch_ops AS o
        WHERE o.user_id = v_user_id
          AND o.patch_id = apply_patch.patch_id
          AND o.op_no = ANY(v_op_nos)
        ORDER BY o.op_no
        FOR UPDATE
    LOOP
        op_id := v_op.op_id;
        op := v_op.op;
        node_id := v_op.node_id;
        IF v_op.applied_at IS NOT NULL THEN
            status := 'already_applied';
            detail := format('applied at %s in %s mode', v_op.applied_at, v_op.applied_mode);
            node_version := v_op.applied_version;
        ELSE
            v_result := prme._apply_patch_op(v_op);
            status := v_result.status;
            detail := v_result.detail;
            node_version := v_result.node_version;
            IF v_result.status = 'applied' THEN
                UPDATE prme.patch_ops AS o SET
                    applied_at = now(),
                    applied_mode = apply_patch.mode,
                    applied_version = v_result.node_version
                WHERE o.user_id = v_user_id AND o.patch_id = v_op.patch_id AND o.op_no = v_op.op_no;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION prme.apply_patch(text, uuid, text[], text) IS
'Applies ops of a maintenance patch of user_id. manual: exactly the ops listed in op_ids (at most 10000 ids of at '
'most 64 characters; PR404 if one is not in the patch); auto (op_ids null): decay ops and stability increases that need no review, never a decrease or '
'mark_contested. One row per op considered: status applied, already_applied or stale (the memory changed since '
'the proposal; nothing written). Each op applies at most once, also under concurrent calls.';

-- >>> sql/postgres/310_recall.sql: E'' literals; a query has at most 1024 distinct lexemes

CREATE OR REPLACE FUNCTION prme._any_lexeme_query(lexemes text[])
RETURNS tsquery
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF lexemes IS NULL OR cardinality(lexemes) = 0 THEN
        RETURN NULL;
    END IF;
    -- 'l1' | 'l2' | ...: each lexeme quoted as tsquery input quotes it (quotes and
    -- backslashes doubled), so no lexeme is parsed or stemmed a second time.
    RETURN array_to_string(
        ARRAY(
            SELECT '''' || replace(replace(l.lexeme, E'\\', E'\\\\'), '''', '''''') || ''''
            FROM unnest(lexemes) AS l (lexeme)
        ),
        ' | '
    )::tsquery;
END;
$$;

COMMENT ON FUNCTION prme._any_lexeme_query(text[]) IS
'Internal: a tsquery matching any of the given (already normalised) lexemes; NULL for none.';

CREATE OR REPLACE FUNCTION prme._query_lexemes(user_id text, query text)
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_lexemes text[] := prme._owner_lexemes(user_id, query);
BEGIN
    -- Each matching memory is scored against every lexeme: bound them, so a call's
    -- work grows with the owner's matches, not with the length of the query.
    IF cardinality(v_lexemes) > 1024 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'query must have at most 1024 distinct search terms',
            DETAIL = format('got %s', cardinality(v_lexemes));
    END IF;
    RETURN v_lexemes;
END;
$$;

COMMENT ON FUNCTION prme._query_lexemes(text, text) IS
'Internal: the owner-keyed lexemes of a search query (as nodes.search holds them); PR422 for more than 1024.';

CREATE OR REPLACE FUNCTION prme.recall(
    user_id text,
    query text DEFAULT NULL,
    scopes text[] DEFAULT NULL,
    max_count integer DEFAULT 10,
    as_of timestamptz DEFAULT now()
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
    v_lexemes text[];
    v_lexeme_count integer;
    v_query tsquery;
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
            r.effective_salience, r.effective_confidence, r.id, r.namespace, r.scope, r.kind, r.content,
            r.lifecycle_state, r.decay_profile, r.confidence_base, r.salience_base, r.reinforcement_boost,
            r.last_reinforced_at, r.created_at, r.updated_at, r.version
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
    v_lexeme_count := cardinality(v_lexemes);
    IF v_lexeme_count = 0 THEN
        RETURN;  -- only stop words and punctuation: nothing can match
    END IF;
    v_query := prme._any_lexeme_query(v_lexemes);

    -- Same shape as above, plus the match and relevance: the memory's lexemes that
    -- are in the query, i.e. all of them minus the rest. The query's lexemes carry
    -- the owner's key, so the GIN index on search finds this owner's matches alone;
    -- the owner test stays outside the inner level, as a recheck (two owners whose
    -- keys collided would share postings), so the planner does not also scan the
    -- owner's rows in the primary key to intersect them.
    RETURN QUERY
    SELECT (row_number() OVER (ORDER BY r.score DESC, r.id))::integer, r.score, r.relevance,
        r.effective_salience, r.effective_confidence, r.id, r.namespace, r.scope, r.kind, r.content,
        r.lifecycle_state, r.decay_profile, r.confidence_base, r.salience_base, r.reinforcement_boost,
        r.last_reinforced_at, r.created_at, r.updated_at, r.version
    FROM (
        SELECT s.* FROM (
            SELECT d.*, d.relevance * (0.5 + 0.25 * d.effective_salience + 0.25 * d.effective_confidence) AS score
            FROM (
                SELECT n.user_id, n.id, n.namespace, n.scope, n.kind, n.content, n.lifecycle_state, n.decay_profile,
                    n.confidence_base, n.salience_base, n.reinforcement_boost, n.last_reinforced_at,
                    n.created_at, n.updated_at, n.version,
                    (length(n.search) - length(ts_delete(n.search, v_lexemes)))::double precision
                    / v_lexeme_count AS relevance,
                    prme._effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                    ) AS effective_salience,
                    prme._effective_confidence(n.confidence_base, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                    ) AS effective_confidence
                FROM prme.nodes AS n
                WHERE n.search @@ v_query
                  AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                  AND (v_scopes IS NULL OR n.scope = ANY (v_scopes))
                OFFSET 0  -- a level of its own: each effective value is computed once per row
            ) AS d
            WHERE d.user_id = v_user_id
        ) AS s
        ORDER BY s.score DESC, s.id
        LIMIT recall.max_count
    ) AS r
    ORDER BY r.score DESC, r.id;
END;
$$;

COMMENT ON FUNCTION prme.recall(text, text, text[], integer, timestamptz) IS
'Full-text recall over the memories of user_id, best first: relevance (share of the query''s lexemes the memory '
'has) times 0.5 + 0.25 * effective_salience + 0.25 * effective_confidence at as_of (default now; NULL means now), '
'ties by id. A NULL or blank query ranks every memory by strength alone. scopes (NULL = all) filters; max_count is '
'1..1000; the query is at most 64 KiB with at most 1024 distinct lexemes. Archived and deprecated memories are '
'excluded. Nothing is written. See docs/RECALL.md.';

-- >>> sql/postgres/315_find_nodes.sql: a query has at most 1024 distinct lexemes, a list at
-- most 100 entries

CREATE OR REPLACE FUNCTION prme.find_nodes(
    user_id text,
    query text DEFAULT NULL,
    scopes text[] DEFAULT NULL,
    stabilities text[] DEFAULT NULL,
    lifecycle_states text[] DEFAULT NULL,
    max_count integer DEFAULT 50
)
RETURNS SETOF prme.node_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(find_nodes.user_id);
    v_scopes text[] := prme._valid_scopes(find_nodes.scopes);
    v_lexemes text[];
    v_query tsquery;
BEGIN
    IF find_nodes.max_count IS NULL OR find_nodes.max_count NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 1000';
    END IF;
    IF octet_length(find_nodes.query) > 65536 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'query must be at most 65536 bytes',
            DETAIL = format('got %s bytes', octet_length(find_nodes.query));
    END IF;
    IF find_nodes.stabilities IS NOT NULL
        AND (
            cardinality(find_nodes.stabilities) NOT BETWEEN 1 AND 100
            OR array_ndims(find_nodes.stabilities) <> 1
            OR array_position(find_nodes.stabilities, NULL) IS NOT NULL
            OR NOT find_nodes.stabilities <@ ARRAY['low', 'semi-stable', 'stable']
        ) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'stabilities must be NULL or a list (of at most 100) of low, semi-stable and stable';
    END IF;
    IF find_nodes.lifecycle_states IS NOT NULL
        AND (
            cardinality(find_nodes.lifecycle_states) NOT BETWEEN 1 AND 100
            OR array_ndims(find_nodes.lifecycle_states) <> 1
            OR array_position(find_nodes.lifecycle_states, NULL) IS NOT NULL
            OR NOT find_nodes.lifecycle_states <@ ARRAY['active', 'contested', 'superseded', 'deprecated', 'archived']
        ) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'lifecycle_states must be NULL or a list (of at most 100) of active, contested, superseded, '
            'deprecated and archived';
    END IF;

    IF find_nodes.query IS NULL OR btrim(find_nodes.query, E' \t\n\r\f\v') = '' THEN
        RETURN QUERY
        SELECT (prme._node_view(n, FALSE)).*
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id
          AND (v_scopes IS NULL OR n.scope = ANY (v_scopes))
          AND (find_nodes.stabilities IS NULL OR n.stability = ANY (find_nodes.stabilities))
          AND (find_nodes.lifecycle_states IS NULL OR n.lifecycle_state = ANY (find_nodes.lifecycle_states))
        ORDER BY n.updated_at DESC, n.id
        LIMIT find_nodes.max_count;
        RETURN;
    END IF;

    v_lexemes := prme._query_lexemes(v_user_id, find_nodes.query);
    IF cardinality(v_lexemes) = 0 THEN
        RETURN;  -- only stop words and punctuation: nothing can match
    END IF;
    v_query := prme._any_lexeme_query(v_lexemes);
    -- As in recall: the GIN index finds this owner's matches; the owner test rechecks.
    -- Most of the query's words first, then the most recently changed.
    RETURN QUERY
    SELECT (prme._node_view(n, FALSE)).*
    FROM prme.nodes AS n
    WHERE n.search @@ v_query
      AND n.user_id = v_user_id
      AND (v_scopes IS NULL OR n.scope = ANY (v_scopes))
      AND (find_nodes.stabilities IS NULL OR n.stability = ANY (find_nodes.stabilities))
      AND (find_nodes.lifecycle_states IS NULL OR n.lifecycle_state = ANY (find_nodes.lifecycle_states))
    ORDER BY length(n.search) - length(ts_delete(n.search, v_lexemes)) DESC, n.updated_at DESC, n.id
    LIMIT find_nodes.max_count;
END;
$$;

COMMENT ON FUNCTION prme.find_nodes(text, text, text[], text[], text[], integer) IS
'Memories of user_id in any lifecycle state for review: matching any word of query as recall matches (NULL or '
'blank: all), in the given scopes, stabilities and lifecycle states (NULL: any); most query words first, then '
'newest change first; max_count 1..1000; the query at most 64 KiB with 1024 distinct lexemes, each list at most '
'100 entries. Nothing is written.';

-- >>> sql/postgres/400_jcs.sql: E'' literals; canonical_json and payload_hash take at most 1
-- MiB

CREATE OR REPLACE FUNCTION prme._sha1(data bytea)
RETURNS bytea
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_length bigint := octet_length(data);
    v_message bytea;
    v_w bigint[];
    v_h0 bigint := 1732584193;
    v_h1 bigint := 4023233417;
    v_h2 bigint := 2562383102;
    v_h3 bigint := 271733878;
    v_h4 bigint := 3285377520;
    v_a bigint;
    v_b bigint;
    v_c bigint;
    v_d bigint;
    v_e bigint;
    v_f bigint;
    v_k bigint;
    v_t bigint;
    v_offset integer;
BEGIN
    -- FIPS 180-4: pad with 0x80, zeros to 56 mod 64, then the bit length (big-endian).
    v_message := data || E'\\x80'::bytea
        || substr(decode(repeat('00', 64), 'hex'), 1, (119 - (v_length % 64)::integer) % 64)
        || int8send(v_length * 8);
    FOR v_block IN 0 .. octet_length(v_message) / 64 - 1 LOOP
        v_w := '{}';
        FOR v_i IN 0 .. 15 LOOP
            v_offset := v_block * 64 + v_i * 4;
            v_w[v_i] := (get_byte(v_message, v_offset)::bigint << 24)
                | (get_byte(v_message, v_offset + 1)::bigint << 16)
                | (get_byte(v_message, v_offset + 2)::bigint << 8)
                | get_byte(v_message, v_offset + 3)::bigint;
        END LOOP;
        FOR v_i IN 16 .. 79 LOOP
            v_t := v_w[v_i - 3] # v_w[v_i - 8] # v_w[v_i - 14] # v_w[v_i - 16];
            v_w[v_i] := ((v_t << 1) | (v_t >> 31)) & 4294967295;
        END LOOP;
        v_a := v_h0;
        v_b := v_h1;
        v_c := v_h2;
        v_d := v_h3;
        v_e := v_h4;
        FOR v_i IN 0 .. 79 LOOP
            IF v_i < 20 THEN
                v_f := (v_b & v_c) | ((v_b # 4294967295) & v_d);
                v_k := 1518500249;
            ELSIF v_i < 40 THEN
                v_f := v_b # v_c # v_d;
                v_k := 1859775393;
            ELSIF v_i < 60 THEN
                v_f := (v_b & v_c) | (v_b & v_d) | (v_c & v_d);
                v_k := 2400959708;
            ELSE
                v_f := v_b # v_c # v_d;
                v_k := 3395469782;
            END IF;
            v_t := ((((v_a << 5) | (v_a >> 27)) & 4294967295) + v_f + v_e + v_k + v_w[v_i]) & 4294967295;
            v_e := v_d;
            v_d := v_c;
            v_c := ((v_b << 30) | (v_b >> 2)) & 4294967295;
            v_b := v_a;
            v_a := v_t;
        END LOOP;
        v_h0 := (v_h0 + v_a) & 4294967295;
        v_h1 := (v_h1 + v_b) & 4294967295;
        v_h2 := (v_h2 + v_c) & 4294967295;
        v_h3 := (v_h3 + v_d) & 4294967295;
        v_h4 := (v_h4 + v_e) & 4294967295;
    END LOOP;
    RETURN substr(int8send(v_h0), 5) || substr(int8send(v_h1), 5) || substr(int8send(v_h2), 5)
        || substr(int8send(v_h3), 5) || substr(int8send(v_h4), 5);
END;
$$;

COMMENT ON FUNCTION prme._sha1(bytea) IS
'Internal: SHA-1 (FIPS 180-4) of data, 20 bytes. Only for uuid v5 names; never for integrity.';

CREATE OR REPLACE FUNCTION prme._jcs_double(value float8)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
SET extra_float_digits = 1
AS $$
DECLARE
    v_abs float8 := abs(value);
    v_parts text[];
    v_digits text;
    v_trimmed text;
    v_point integer;
    v_count integer;
    v_length integer;
    v_down text;
    v_up text;
    v_up_point integer;
    v_down_ok boolean;
    v_up_ok boolean;
    v_exact numeric;
    v_below numeric;
    v_above numeric;
    v_sign text := CASE WHEN value < 0 THEN '-' ELSE '' END;
BEGIN
    IF value = 0 THEN
        RETURN '0';
    END IF;
    -- float8out with extra_float_digits > 0 writes round-trip digits as
    -- D[.DDD][e+-XX]: value = 0.DIGITS * 10^v_point, DIGITS without leading or
    -- trailing zeros.
    v_parts := regexp_match(v_abs::text, E'^([0-9]+)(?:\\.([0-9]+))?(?:e([-+][0-9]+))?$');
    v_digits := v_parts[1] || coalesce(v_parts[2], '');
    v_point := length(v_parts[1]) + coalesce(v_parts[3]::integer, 0);
    v_trimmed := ltrim(v_digits, '0');
    v_point := v_point - (length(v_digits) - length(v_trimmed));
    v_digits := rtrim(v_trimmed, '0');

    -- PostgreSQL's Ryu leaves out the two halfway points to the neighbouring
    -- doubles (it does not accept bounds); ECMAScript and Python count them, since
    -- a tie rounds to the even mantissa. Only such a halfway point can be shorter
    -- than PostgreSQL's digits, and it is then the digits cut or cut and rounded
    -- up: try shorter lengths while one of the two still reads back as value.
    v_length := length(v_digits) - 1;
    WHILE v_length >= 1 LOOP
        v_down := left(v_digits, v_length);
        v_up := (v_down::numeric + 1)::text;
        v_up_point := v_point + length(v_up) - v_length;
        v_down_ok := ('0.' || v_down || 'e' || v_point)::float8 = v_abs;
        v_up_ok := ('0.' || v_up || 'e' || v_up_point)::numeric <= 1.7976931348623158e308
            AND ('0.' || v_up || 'e' || v_up_point)::float8 = v_abs;
        IF v_down_ok AND v_up_ok THEN
            -- Both halfway points: the one nearer the digits found, on a tie the even one.
            v_exact := ('0.' || v_digits || 'e' || v_point)::numeric;
            v_below := v_exact - ('0.' || v_down || 'e' || v_point)::numeric;
            v_above := ('0.' || v_up || 'e' || v_up_point)::numeric - v_exact;
            v_down_ok := v_below < v_above OR (v_below = v_above AND right(v_down, 1)::integer % 2 = 0);
        END IF;
        IF v_down_ok THEN
            v_digits := rtrim(v_down, '0');
        ELSIF v_up_ok THEN
            v_digits := rtrim(v_up, '0');
            v_point := v_up_point;
        ELSE
            EXIT;
        END IF;
        v_length := least(v_length, length(v_digits)) - 1;
    END LOOP;

    v_count := length(v_digits);
    -- ECMA-262 Number::toString(10) for k = v_count digits and n = v_point.
    IF v_count <= v_point AND v_point <= 21 THEN
        RETURN v_sign || v_digits || repeat('0', v_point - v_count);
    ELSIF 0 < v_point AND v_point <= 21 THEN
        RETURN v_sign || left(v_digits, v_point) || '.' || substr(v_digits, v_point + 1);
    ELSIF -6 < v_point AND v_point <= 0 THEN
        RETURN v_sign || '0.' || repeat('0', -v_point) || v_digits;
    END IF;
    RETURN v_sign || left(v_digits, 1)
        || CASE WHEN v_count > 1 THEN '.' || substr(v_digits, 2) ELSE '' END
        || 'e' || CASE WHEN v_point > 0 THEN '+' ELSE '-' END || abs(v_point - 1)::text;
END;
$$;

COMMENT ON FUNCTION prme._jcs_double(float8) IS
'Internal: a finite double as ECMAScript''s Number::toString writes it (RFC 8785 3.2.2.3): the shortest digits '
'that read back as the same double, ties between neighbours counted as ECMAScript counts them.';

CREATE OR REPLACE FUNCTION prme._jcs_key_order(key text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Byte order of UTF-8 (COLLATE "C") is code point order; UTF-16 code-unit
    -- order differs only in putting U+E000..U+FFFF after every astral character.
    -- Prefixing those with U+10FFFF (and U+10FFFF itself with U+10FFFF U+0001)
    -- makes code point order agree with UTF-16 order. prme._jcs calls this only
    -- for keys with a character from U+E000 up; any other key is its own sort key.
    RETURN regexp_replace(
        replace(key, E'\U0010FFFF', E'\U0010FFFF\u0001'),
        E'([\\uE000-\\uFFFF])', E'\U0010FFFF\\1', 'g'
    );
END;
$$;

COMMENT ON FUNCTION prme._jcs_key_order(text) IS
'Internal: a sort key whose COLLATE "C" order is the UTF-16 code-unit order of object keys (RFC 8785 3.2.3).';

CREATE OR REPLACE FUNCTION prme._jcs(value jsonb)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    CASE jsonb_typeof(value)
        WHEN 'object' THEN
            RETURN '{' || coalesce((
                SELECT string_agg(
                    to_json(e.key)::text || ':' || CASE jsonb_typeof(e.value)
                        WHEN 'number' THEN CASE
                            -- The common case inline (no call): see the array branch.
                            WHEN e.value::text ~ E'^-?(0|[1-9][0-9]*)(\\.[0-9]*[1-9])?$'
                                AND length(translate(e.value::text, '-.', '')) <= 15
                                AND e.value::text !~ E'^-?0\\.00000' THEN e.value::text
                            ELSE prme._jcs_number(e.value::numeric)
                        END
                        WHEN 'object' THEN prme._jcs(e.value)
                        WHEN 'array' THEN prme._jcs(e.value)
                        ELSE e.value::text
                    END,
                    ',' ORDER BY CASE
                        WHEN e.key ~ E'[\\uE000-\\U0010FFFF]' THEN prme._jcs_key_order(e.key) ELSE e.key
                    END COLLATE "C"
                )
                FROM jsonb_each(value) AS e
            ), '') || '}';
        WHEN 'array' THEN
            RETURN '[' || coalesce((
                SELECT string_agg(
                    CASE jsonb_typeof(e.value)
                        WHEN 'number' THEN CASE
                            -- The common case inline, without calling _jcs_number: at most
                            -- 15 digits, no trailing fractional zero, at least 1e-5. Such a
                            -- number is exact or round-trips through a double, so its own
                            -- text is the shortest form (rules 1 and 2 of _jcs_number).
                            WHEN e.value::text ~ E'^-?(0|[1-9][0-9]*)(\\.[0-9]*[1-9])?$'
                                AND length(translate(e.value::text, '-.', '')) <= 15
                                AND e.value::text !~ E'^-?0\\.00000' THEN e.value::text
                            ELSE prme._jcs_number(e.value::numeric)
                        END
                        WHEN 'object' THEN prme._jcs(e.value)
                        WHEN 'array' THEN prme._jcs(e.value)
                        ELSE e.value::text
                    END,
                    ',' ORDER BY e.position
                )
                FROM jsonb_array_elements(value) WITH ORDINALITY AS e (value, position)
            ), '') || ']';
        WHEN 'number' THEN
            RETURN prme._jcs_number(value::numeric);
        ELSE
            -- Strings: jsonb's output escapes exactly as RFC 8785 does. true, false, null.
            RETURN value::text;
    END CASE;
END;
$$;

COMMENT ON FUNCTION prme._jcs(jsonb) IS
'Internal: the RFC 8785 canonical text of a JSON value (see prme.canonical_json).';

CREATE OR REPLACE FUNCTION prme.canonical_json(value jsonb)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'value must not be null';
    END IF;
    -- The same bound as a ledger payload's: canonicalising is linear work in PL/pgSQL.
    IF pg_column_size(value) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'value must be at most 1 MiB';
    END IF;
    RETURN prme._jcs(value);
END;
$$;

COMMENT ON FUNCTION prme.canonical_json(jsonb) IS
'The RFC 8785 (JCS) canonical text of a JSON value: keys in UTF-16 order, minimal escapes, numbers as '
'ECMAScript writes doubles. PR422 for a number out of double range or a value over 1 MiB.';

CREATE OR REPLACE FUNCTION prme.payload_hash(payload jsonb)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF payload IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must not be null';
    END IF;
    IF pg_column_size(payload) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must be at most 1 MiB';
    END IF;
    RETURN prme._sha256_hex(prme._jcs(payload));
END;
$$;

COMMENT ON FUNCTION prme.payload_hash(jsonb) IS
'sha256 (lowercase hex) of the RFC 8785 canonical UTF-8 text of payload: the payload_hash that '
'prme.submit_operation expects. PR422 for a payload over 1 MiB.';

-- >>> sql/postgres/440_run_operations.sql: no literal depends on standard_conforming_strings

CREATE OR REPLACE FUNCTION prme._payload_time(payload jsonb, field text)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text text := prme._payload_text(payload, field);
BEGIN
    -- An explicit offset is required: the session's TimeZone must not change the meaning.
    IF v_text IS NOT NULL AND v_text !~ (
        E'^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\\.[0-9]{1,6})?)?'
        || '(Z|z|[+-][0-9]{2}(:?[0-9]{2})?)$'
    ) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('payload field %s must be an ISO 8601 time with a UTC offset', field);
    END IF;
    RETURN v_text::timestamptz;
END;
$$;

COMMENT ON FUNCTION prme._payload_time(jsonb, text) IS
'Internal: an ISO 8601 time field (with Z or an offset) of a payload; NULL when absent; PR422 otherwise.';

-- >>> sql/postgres/450_long_memories.sql: no literal depends on standard_conforming_strings

CREATE OR REPLACE FUNCTION prme._word_count(content text)
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

CREATE OR REPLACE FUNCTION prme._plan_parts(content text, token_budget integer)
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
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (11, 'hostile_callers', '6a73b5b14eb81f55675d4e3cfd672ed77262ed0bb7faa01a71131dd7a36bf4be');

-- =============================================================================
-- prme-pg: snapshots (immutable, content-addressed prompt generations)
--
-- A generation is the canonical RFC 8785 document of a bounded, ranked selection
-- of one scope's active memories:
--   {"items":[{"content":"...","id":"<uuid>","kind":"fact"},...],
--    "scope":"personal","user_id":"alice","version":1}
-- Its id is the sha256 hex of the document's UTF-8 bytes, so identical content is
-- the identical generation. Generations are stored once, never changed (triggers
-- refuse UPDATE, DELETE and TRUNCATE; a CHECK recomputes the id from the text).
--
-- Each (user_id, scope) has one current pointer (snapshot_heads) that publishing
-- advances atomically under the head's row lock, optionally compare-and-set
-- against the generation the caller expects; every advance is appended to
-- snapshot_history with the generation it replaced. seq counts the advances, so
-- the pointer only moves forward. Readers join head and generation in one
-- statement: they see one complete generation, old or new, never a mixture.
-- See docs/SNAPSHOTS.md.
-- =============================================================================

CREATE TABLE prme.snapshot_generations (
    user_id text NOT NULL,
    scope text NOT NULL CHECK (scope ~ '^[a-z][a-z0-9_-]{0,62}$'),
    generation_id text NOT NULL,
    document text NOT NULL,
    item_count integer NOT NULL CHECK (item_count BETWEEN 0 AND 10000),
    byte_size integer NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, scope, generation_id),
    -- Content addressing, held by the table itself: the id is the hash of the text.
    CONSTRAINT snapshot_generations_content_addressed CHECK (
        generation_id = encode(sha256(convert_to(document, 'UTF8')), 'hex')
        AND byte_size = octet_length(document)
    )
);

COMMENT ON TABLE prme.snapshot_generations IS
'Immutable snapshot generations: the RFC 8785 document of a ranked selection of one scope''s memories, keyed by '
'the sha256 of its text. created_at is when that content was first published. Updates and deletes are refused.';

CREATE TRIGGER snapshot_generations_append_only
BEFORE UPDATE OR DELETE ON prme.snapshot_generations
FOR EACH ROW EXECUTE FUNCTION prme._refuse_change();

CREATE TRIGGER snapshot_generations_no_truncate
BEFORE TRUNCATE ON prme.snapshot_generations
FOR EACH STATEMENT EXECUTE FUNCTION prme._refuse_change();

-- Readers: prme_reader the rows of the owners bound to it, prme_auditor every row
-- (015_reader_bindings.sql).
ALTER TABLE prme.snapshot_generations ENABLE ROW LEVEL SECURITY;
GRANT SELECT ON prme.snapshot_generations TO prme_reader, prme_auditor;
CREATE POLICY snapshot_generations_reader_owner ON prme.snapshot_generations FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY snapshot_generations_auditor_all ON prme.snapshot_generations FOR SELECT TO prme_auditor USING (TRUE);

CREATE TABLE prme.snapshot_heads (
    user_id text NOT NULL,
    scope text NOT NULL,
    generation_id text,
    seq bigint NOT NULL CHECK (seq >= 0),
    advanced_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, scope),
    FOREIGN KEY (user_id, scope, generation_id) REFERENCES prme.snapshot_generations (user_id, scope, generation_id),
    -- seq 0 without a generation exists only inside a first publish, which always
    -- advances it to 1 or rolls back: committed heads point at a generation.
    CHECK ((seq = 0) = (generation_id IS NULL))
);

COMMENT ON TABLE prme.snapshot_heads IS
'The current generation of each (user_id, scope) and how many times that pointer has advanced (seq). Only '
'prme.publish_snapshot moves it, one step forward at a time; deletes are refused.';

CREATE FUNCTION prme._snapshot_head_forward()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.user_id IS DISTINCT FROM OLD.user_id OR NEW.scope IS DISTINCT FROM OLD.scope
       OR NEW.seq IS DISTINCT FROM OLD.seq + 1 OR NEW.generation_id IS NULL
       OR NEW.generation_id IS NOT DISTINCT FROM OLD.generation_id THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'prme.snapshot_heads only moves forward: seq + 1 to another generation of the same scope',
            DETAIL = format('seq %s -> %s', OLD.seq, NEW.seq);
    END IF;
    RETURN NEW;
END;
$$;

COMMENT ON FUNCTION prme._snapshot_head_forward() IS
'Internal trigger: an update of a snapshot head must keep its owner and scope, advance seq by exactly one and '
'point at another generation.';

CREATE TRIGGER snapshot_heads_forward_only
BEFORE UPDATE ON prme.snapshot_heads
FOR EACH ROW EXECUTE FUNCTION prme._snapshot_head_forward();

CREATE TRIGGER snapshot_heads_no_delete
BEFORE DELETE ON prme.snapshot_heads
FOR EACH ROW EXECUTE FUNCTION prme._refuse_change();

CREATE TRIGGER snapshot_heads_no_truncate
BEFORE TRUNCATE ON prme.snapshot_heads
FOR EACH STATEMENT EXECUTE FUNCTION prme._refuse_change();

-- Readers: prme_reader the rows of the owners bound to it, prme_auditor every row
-- (015_reader_bindings.sql).
ALTER TABLE prme.snapshot_heads ENABLE ROW LEVEL SECURITY;
GRANT SELECT ON prme.snapshot_heads TO prme_reader, prme_auditor;
CREATE POLICY snapshot_heads_reader_owner ON prme.snapshot_heads FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY snapshot_heads_auditor_all ON prme.snapshot_heads FOR SELECT TO prme_auditor USING (TRUE);

CREATE TABLE prme.snapshot_history (
    user_id text NOT NULL,
    scope text NOT NULL,
    seq bigint NOT NULL CHECK (seq > 0),
    generation_id text NOT NULL,
    previous_generation_id text,
    advanced_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, scope, seq),
    FOREIGN KEY (user_id, scope, generation_id) REFERENCES prme.snapshot_generations (user_id, scope, generation_id),
    FOREIGN KEY (user_id, scope, previous_generation_id)
    REFERENCES prme.snapshot_generations (user_id, scope, generation_id),
    CHECK (generation_id IS DISTINCT FROM previous_generation_id),
    CHECK ((seq = 1) = (previous_generation_id IS NULL))
);

COMMENT ON TABLE prme.snapshot_history IS
'Append-only log of pointer advances per (user_id, scope): seq, the generation made current and the one it '
'replaced. Updates and deletes are refused.';

CREATE INDEX snapshot_history_generation_idx ON prme.snapshot_history (user_id, scope, generation_id, seq);

CREATE TRIGGER snapshot_history_append_only
BEFORE UPDATE OR DELETE ON prme.snapshot_history
FOR EACH ROW EXECUTE FUNCTION prme._refuse_change();

CREATE TRIGGER snapshot_history_no_truncate
BEFORE TRUNCATE ON prme.snapshot_history
FOR EACH STATEMENT EXECUTE FUNCTION prme._refuse_change();

-- Readers: prme_reader the rows of the owners bound to it, prme_auditor every row
-- (015_reader_bindings.sql).
ALTER TABLE prme.snapshot_history ENABLE ROW LEVEL SECURITY;
GRANT SELECT ON prme.snapshot_history TO prme_reader, prme_auditor;
CREATE POLICY snapshot_history_reader_owner ON prme.snapshot_history FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY snapshot_history_auditor_all ON prme.snapshot_history FOR SELECT TO prme_auditor USING (TRUE);

-- What current_snapshot and get_snapshot return.
CREATE TYPE prme.snapshot_view AS (
    generation_id text,
    seq bigint,
    document text,
    item_count integer,
    byte_size integer,
    created_at timestamptz,
    advanced_at timestamptz
);

COMMENT ON TYPE prme.snapshot_view IS
'A generation as read back: id, seq of the latest advance that made it current, the document exactly as hashed, '
'its item count and bytes, when its content was first published and when it last became current.';

CREATE FUNCTION prme._verified_document(user_id text, scope text, generation_id text, document text)
RETURNS json
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_doc json;
BEGIN
    IF prme._sha256_hex(document) IS DISTINCT FROM generation_id THEN
        RAISE EXCEPTION USING
            ERRCODE = 'data_corrupted',
            MESSAGE = 'snapshot generation does not verify: sha256 of its document differs from its id',
            DETAIL = format('user_id %s, scope %s, generation %s', user_id, scope, generation_id);
    END IF;
    v_doc := document::json;
    IF v_doc ->> 'user_id' IS DISTINCT FROM user_id OR v_doc ->> 'scope' IS DISTINCT FROM scope
       OR v_doc ->> 'version' IS DISTINCT FROM '1' OR json_typeof(v_doc -> 'items') IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'data_corrupted',
            MESSAGE = 'snapshot generation does not verify: its document names another owner, scope or format',
            DETAIL = format('user_id %s, scope %s, generation %s', user_id, scope, generation_id);
    END IF;
    RETURN v_doc;
END;
$$;

COMMENT ON FUNCTION prme._verified_document(text, text, text, text) IS
'Internal: the parsed document of a generation after checking that its sha256 is its id and that it names this '
'owner, scope and format version 1; raises data_corrupted (XX001) otherwise.';

CREATE FUNCTION prme._snapshot_envelope(user_id text, scope text)
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The text before and after the items: keys in RFC 8785 order (all ASCII).
    RETURN ARRAY[
        '{"items":[',
        '],"scope":' || to_json(scope)::text || ',"user_id":' || to_json(user_id)::text || ',"version":1}'
    ];
END;
$$;

COMMENT ON FUNCTION prme._snapshot_envelope(text, text) IS
'Internal: the two pieces of a generation document around its items, {"items":[ and ],"scope":...,"version":1}.';

CREATE FUNCTION prme._snapshot_item(id uuid, kind text, content text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- to_json() escapes strings exactly as RFC 8785 does; uuid text is lowercase.
    RETURN '{"content":' || to_json(content)::text || ',"id":"' || id::text || '","kind":' || to_json(kind)::text || '}';
END;
$$;

COMMENT ON FUNCTION prme._snapshot_item(uuid, text, text) IS
'Internal: one item of a generation document, {"content":...,"id":...,"kind":...} in RFC 8785 form.';

CREATE FUNCTION prme.publish_snapshot(
    user_id text,
    scope text,
    max_items integer DEFAULT 100,
    max_bytes integer DEFAULT 65536,
    expected_generation_id text DEFAULT NULL
)
RETURNS TABLE (
    generation_id text,
    seq bigint,
    previous_generation_id text,
    item_count integer,
    byte_size integer,
    advanced boolean
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(publish_snapshot.user_id);
    v_scope text := prme._valid_name('scope', publish_snapshot.scope);
    v_now timestamptz := now();
    v_envelope text[];
    v_head prme.snapshot_heads;
    v_node record;
    v_item text;
    v_item_bytes integer;
    v_items text[] := '{}'::text[];
    v_bytes integer;
    v_min_item_bytes integer;
    v_document text;
    v_generation_id text;
BEGIN
    IF publish_snapshot.max_items IS NULL OR publish_snapshot.max_items NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_items must be between 1 and 10000';
    END IF;
    IF publish_snapshot.max_bytes IS NULL OR publish_snapshot.max_bytes NOT BETWEEN 1 AND 16777216 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_bytes must be between 1 and 16777216';
    END IF;
    IF publish_snapshot.expected_generation_id IS NOT NULL
       AND publish_snapshot.expected_generation_id <> 'none'
       AND publish_snapshot.expected_generation_id !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'expected_generation_id must be 64 lowercase hex digits, or ''none'' for a scope never published';
    END IF;
    v_envelope := prme._snapshot_envelope(v_user_id, v_scope);
    v_bytes := octet_length(v_envelope[1]) + octet_length(v_envelope[2]);
    IF v_bytes > publish_snapshot.max_bytes THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'max_bytes is too small for even an empty generation of this scope',
            DETAIL = format('an empty generation takes %s bytes', v_bytes);
    END IF;

    -- Lock the head: publishes of one scope run one at a time, each selecting from
    -- the memories as they are once it holds the lock. A scope's first publish
    -- creates the head (seq 0, no generation) and locks that.
    SELECT h.* INTO v_head FROM prme.snapshot_heads AS h
    WHERE h.user_id = v_user_id AND h.scope = v_scope
    FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO prme.snapshot_heads (user_id, scope, generation_id, seq, advanced_at)
        VALUES (v_user_id, v_scope, NULL, 0, v_now)
        ON CONFLICT DO NOTHING;
        SELECT h.* INTO STRICT v_head FROM prme.snapshot_heads AS h
        WHERE h.user_id = v_user_id AND h.scope = v_scope
        FOR UPDATE;
    END IF;

    IF publish_snapshot.expected_generation_id IS NOT NULL
       AND coalesce(v_head.generation_id, 'none') <> publish_snapshot.expected_generation_id THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR409',
            MESSAGE = 'the current snapshot is not the expected generation',
            DETAIL = format('expected %s, current %s (seq %s)',
                publish_snapshot.expected_generation_id, coalesce(v_head.generation_id, 'none'), v_head.seq);
    END IF;

    -- Strongest first, then id; take each memory that still fits (a long one that
    -- does not fit is skipped, shorter ones after it may still), up to max_items.
    v_min_item_bytes := octet_length(prme._snapshot_item('00000000-0000-0000-0000-000000000000', 'a', ''));
    FOR v_node IN
        SELECT n.id, n.kind, n.content
        FROM prme.nodes AS n
        CROSS JOIN LATERAL (
            SELECT prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_now) AS age_days
        ) AS x
        WHERE n.user_id = v_user_id AND n.scope = v_scope AND n.lifecycle_state = 'active'
        ORDER BY prme._effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile, x.age_days)
            + prme._effective_confidence(n.confidence_base, n.decay_profile, x.age_days) DESC,
            n.id
    LOOP
        v_item := prme._snapshot_item(v_node.id, v_node.kind, v_node.content);
        v_item_bytes := octet_length(v_item) + CASE WHEN cardinality(v_items) > 0 THEN 1 ELSE 0 END;
        IF v_bytes + v_item_bytes <= publish_snapshot.max_bytes THEN
            v_items := v_items || v_item;
            v_bytes := v_bytes + v_item_bytes;
            EXIT WHEN cardinality(v_items) >= publish_snapshot.max_items;
        END IF;
        EXIT WHEN v_bytes + v_min_item_bytes + 1 > publish_snapshot.max_bytes;
    END LOOP;

    v_document := v_envelope[1] || array_to_string(v_items, ',') || v_envelope[2];
    IF octet_length(v_document) <> v_bytes THEN
        RAISE EXCEPTION 'prme.publish_snapshot: byte accounting is off (% <> %)', octet_length(v_document), v_bytes;
    END IF;
    v_generation_id := prme._sha256_hex(v_document);

    generation_id := v_generation_id;
    previous_generation_id := v_head.generation_id;
    item_count := cardinality(v_items);
    byte_size := v_bytes;
    IF v_head.generation_id = v_generation_id THEN
        -- The current generation already has exactly this content: nothing to write.
        seq := v_head.seq;
        advanced := FALSE;
        RETURN NEXT;
        RETURN;
    END IF;

    INSERT INTO prme.snapshot_generations AS g (
        user_id, scope, generation_id, document, item_count, byte_size, created_at
    ) VALUES (
        v_user_id, v_scope, v_generation_id, v_document, cardinality(v_items), v_bytes, v_now
    )
    ON CONFLICT DO NOTHING;  -- published before: the same content, the same generation

    UPDATE prme.snapshot_heads AS h SET
        generation_id = v_generation_id,
        seq = v_head.seq + 1,
        advanced_at = v_now
    WHERE h.user_id = v_user_id AND h.scope = v_scope;
    INSERT INTO prme.snapshot_history AS s (
        user_id, scope, seq, generation_id, previous_generation_id, advanced_at
    ) VALUES (
        v_user_id, v_scope, v_head.seq + 1, v_generation_id, v_head.generation_id, v_now
    );

    seq := v_head.seq + 1;
    advanced := TRUE;
    RETURN NEXT;
END;
$$;

COMMENT ON FUNCTION prme.publish_snapshot(text, text, integer, integer, text) IS
'Publishes the current generation of (user_id, scope): its active memories, strongest first (effective salience '
'plus effective confidence now, then id), as many as fit in max_items (1..10000) and max_bytes (document bytes, '
'1..16777216). The id is the sha256 of the RFC 8785 document, so identical content is the identical generation; '
'republishing the current content writes nothing (advanced = false). With expected_generation_id (or ''none''), '
'a different current generation raises PR409. See docs/SNAPSHOTS.md.';

CREATE FUNCTION prme.current_snapshot(user_id text, scope text)
RETURNS prme.snapshot_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(current_snapshot.user_id);
    v_scope text := prme._valid_name('scope', current_snapshot.scope);
    v_view prme.snapshot_view;
BEGIN
    -- Head and generation in one statement: one complete generation, never a mixture.
    SELECT h.generation_id, h.seq, g.document, g.item_count, g.byte_size, g.created_at, h.advanced_at
    INTO v_view
    FROM prme.snapshot_heads AS h
    JOIN prme.snapshot_generations AS g
        ON g.user_id = h.user_id AND g.scope = h.scope AND g.generation_id = h.generation_id
    WHERE h.user_id = v_user_id AND h.scope = v_scope;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'no snapshot has been published for this scope';
    END IF;
    PERFORM prme._verified_document(v_user_id, v_scope, v_view.generation_id, v_view.document);
    RETURN v_view;
END;
$$;

COMMENT ON FUNCTION prme.current_snapshot(text, text) IS
'The current generation of (user_id, scope): id, seq (pointer advances so far), the document exactly as hashed, '
'its item count and bytes, when its content was first published and when it became current. Verifies the '
'document against its id (XX001 data_corrupted if not). PR404 when the scope has never been published.';

CREATE FUNCTION prme.get_snapshot(user_id text, scope text, generation_id text)
RETURNS prme.snapshot_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(get_snapshot.user_id);
    v_scope text := prme._valid_name('scope', get_snapshot.scope);
    v_view prme.snapshot_view;
BEGIN
    IF get_snapshot.generation_id IS NULL OR get_snapshot.generation_id !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'generation_id must be 64 lowercase hex digits';
    END IF;
    SELECT g.generation_id, s.seq, g.document, g.item_count, g.byte_size, g.created_at, s.advanced_at
    INTO v_view
    FROM prme.snapshot_generations AS g
    CROSS JOIN LATERAL (
        SELECT hs.seq, hs.advanced_at FROM prme.snapshot_history AS hs
        WHERE hs.user_id = g.user_id AND hs.scope = g.scope AND hs.generation_id = g.generation_id
        ORDER BY hs.seq DESC
        LIMIT 1
    ) AS s
    WHERE g.user_id = v_user_id AND g.scope = v_scope AND g.generation_id = get_snapshot.generation_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'snapshot generation not found';
    END IF;
    PERFORM prme._verified_document(v_user_id, v_scope, v_view.generation_id, v_view.document);
    RETURN v_view;
END;
$$;

COMMENT ON FUNCTION prme.get_snapshot(text, text, text) IS
'One generation of (user_id, scope) by id, current or not, verified like current_snapshot; seq and advanced_at '
'are those of the latest time it became current. PR404 when this owner and scope have no such generation.';

REVOKE ALL ON FUNCTION prme.publish_snapshot(text, text, integer, integer, text) FROM public;
GRANT EXECUTE ON FUNCTION prme.publish_snapshot(text, text, integer, integer, text) TO prme_app;
REVOKE ALL ON FUNCTION prme.current_snapshot(text, text) FROM public;
GRANT EXECUTE ON FUNCTION prme.current_snapshot(text, text) TO prme_app;
REVOKE ALL ON FUNCTION prme.get_snapshot(text, text, text) FROM public;
GRANT EXECUTE ON FUNCTION prme.get_snapshot(text, text, text) TO prme_app;

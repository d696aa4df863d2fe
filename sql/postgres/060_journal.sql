-- =============================================================================
-- prme-pg: journal
--
-- One checksummed record per node mutation, appended in the mutation's own
-- transaction. The record is RFC 8785 canonical JSON stored exactly as hashed
-- (checksum = sha256 hex of its UTF-8 bytes), so verification never depends on
-- jsonb key order, TimeZone or extra_float_digits. Version 2 records carry
-- request_id and prev_checksum (a per-node hash chain, race-free under the node's
-- row lock); version 1 records have neither and verify under their own checksum.
-- A record's request_id is also the idempotency key of the call that wrote it:
-- key_namespace (the node's namespace, set exactly when request_id is) and a
-- unique index make it one per (user_id, namespace), with no key row of its own.
-- See docs/JOURNAL.md.
-- =============================================================================

CREATE TABLE prme.journal (
    user_id text NOT NULL,
    node_id uuid NOT NULL,
    node_version prme.version_number NOT NULL,
    record_version smallint NOT NULL CHECK (record_version IN (1, 2)),
    op text NOT NULL,
    operation_id uuid NOT NULL,
    request_id uuid,
    evidence_id uuid,
    record text NOT NULL,
    checksum prme.sha256_digest NOT NULL,
    prev_checksum prme.sha256_digest,
    recorded_at timestamptz NOT NULL,
    key_namespace text,
    PRIMARY KEY (user_id, node_id, node_version),
    -- No foreign key to prme.nodes: every record is written with its node under the
    -- node's row lock, nodes are never deleted, and verify_journal reports a chain
    -- without its node (node_missing). A key check would be a trigger on every write.
    CHECK (record_version = 2 OR (request_id IS NULL AND prev_checksum IS NULL)),
    CONSTRAINT journal_key_namespace_check CHECK ((request_id IS NULL) = (key_namespace IS NULL))
);

COMMENT ON TABLE prme.journal IS
'Append-only audit of node mutations: RFC 8785 record text, its sha256, and the per-node chain. See docs/JOURNAL.md.';
COMMENT ON COLUMN prme.journal.record IS
'Canonical JSON exactly as hashed. Every other column is a copy of a field of it, kept for indexing.';
COMMENT ON COLUMN prme.journal.key_namespace IS
'The node''s namespace when the record carries a request_id (its after.namespace), else null: the scope of the '
'idempotency key.';

-- The idempotency key of the calls that journal a request_id (prme.reinforce): one
-- record per (user_id, namespace, request_id). A retry finds its record here.
CREATE UNIQUE INDEX journal_request_key ON prme.journal (user_id, key_namespace, request_id)
WHERE request_id IS NOT NULL;

CREATE TRIGGER journal_append_only
BEFORE UPDATE OR DELETE ON prme.journal
FOR EACH ROW EXECUTE FUNCTION prme._refuse_change();

CREATE TRIGGER journal_no_truncate
BEFORE TRUNCATE ON prme.journal
FOR EACH STATEMENT EXECUTE FUNCTION prme._refuse_change();

-- Readers: prme_reader the rows of the owners bound to it, prme_auditor every row
-- (015_reader_bindings.sql).
ALTER TABLE prme.journal ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON prme.journal FROM public;
GRANT SELECT ON prme.journal TO prme_reader, prme_auditor;
CREATE POLICY journal_reader_owner ON prme.journal FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY journal_auditor_all ON prme.journal FOR SELECT TO prme_auditor USING (TRUE);

CREATE FUNCTION prme._journal_record_v2(
    op text,
    policy text,
    operation_id uuid,
    request_id uuid,
    user_id text,
    node_id uuid,
    evidence_id uuid,
    before_state text,
    after_state text,
    prev_checksum text,
    recorded_at timestamptz
)
RETURNS text
LANGUAGE sql
STABLE
PARALLEL SAFE
-- Keys in RFC 8785 order (all ASCII, so code-unit order is byte order). SQL-standard
-- body, no SET clause: inlined (040_nodes.sql, _node_state).
RETURN '{"after":' || after_state
|| ',"before":' || coalesce(before_state, 'null')
|| ',"evidence_id":' || coalesce('"' || evidence_id::text || '"', 'null')
|| ',"node_id":"' || node_id::text
|| '","op":' || to_json(op)::text
|| ',"operation_id":"' || operation_id::text
|| '","policy":' || coalesce(to_json(policy)::text, 'null')
|| ',"prev_checksum":' || coalesce('"' || prev_checksum || '"', 'null')
|| ',"recorded_at":' || prme._json_time(recorded_at)
|| ',"request_id":' || coalesce('"' || request_id::text || '"', 'null')
|| ',"user_id":' || to_json(user_id)::text
|| ',"version":2}';

COMMENT ON FUNCTION prme._journal_record_v2(text, text, uuid, uuid, text, uuid, uuid, text, text, text, timestamptz) IS
'Internal: the canonical text of a version 2 journal record. Pure, so other implementations '
'(the DuckDB port, the Python verifier) are tested byte for byte against it.';

CREATE FUNCTION prme._journal_entry(
    op text,
    policy text,
    operation_id uuid,
    request_id uuid,
    evidence_id uuid,
    before prme.nodes,
    after prme.nodes
)
RETURNS prme.journal
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_entry prme.journal;
BEGIN
    v_entry.user_id := after.user_id;
    v_entry.node_id := after.id;
    v_entry.node_version := after.version;
    v_entry.record_version := 2;
    v_entry.op := op;
    v_entry.operation_id := operation_id;
    v_entry.request_id := request_id;
    v_entry.evidence_id := evidence_id;
    v_entry.prev_checksum := before.last_checksum;
    v_entry.recorded_at := after.updated_at;
    v_entry.key_namespace := CASE WHEN request_id IS NOT NULL THEN after.namespace END;
    v_entry.record := prme._journal_record_v2(
        op, policy, operation_id, request_id, after.user_id, after.id, evidence_id,
        CASE WHEN before.id IS NULL THEN NULL ELSE prme._node_state(before) END,
        prme._node_state(after),
        before.last_checksum,
        after.updated_at
    );
    v_entry.checksum := prme._sha256_hex(v_entry.record);
    RETURN v_entry;
END;
$$;

COMMENT ON FUNCTION prme._journal_entry(text, text, uuid, uuid, uuid, prme.nodes, prme.nodes) IS
'Internal: the journal row for a mutation from before (NULL on create) to after; the caller inserts it '
'and stores its checksum in nodes.last_checksum.';

CREATE FUNCTION prme._parse_record(record text)
RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN record::jsonb;
EXCEPTION WHEN invalid_text_representation THEN
    RETURN NULL;  -- tampered text that is no longer JSON is reported, not raised
END;
$$;

COMMENT ON FUNCTION prme._parse_record(text) IS
'Internal: a journal record parsed as jsonb, or NULL when the text is not valid JSON.';

CREATE FUNCTION prme.verify_journal(user_id text)
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
                   OR v_doc ->> 'prev_checksum' IS DISTINCT FROM v_entry.prev_checksum
                   OR v_entry.key_namespace IS DISTINCT FROM
                   CASE WHEN v_entry.request_id IS NOT NULL THEN v_doc -> 'after' ->> 'namespace' END))
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
    SELECT n.id, n.version::bigint, 'head_mismatch'::text,
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
    SELECT j.node_id, max(j.node_version)::bigint, 'node_missing'::text,
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

REVOKE ALL ON FUNCTION prme.verify_journal(text) FROM public;
GRANT EXECUTE ON FUNCTION prme.verify_journal(text) TO prme_app;

-- =============================================================================
-- prme-pg: node_journal (one memory's journal)
--
-- The journal of one memory with the memory's head, in chain order, for a
-- reviewer who verifies it outside the database record by record (the review
-- console; prme_pg.journal). journal_records exports a whole owner; this reads
-- one chain through the journal's primary key.
-- =============================================================================

CREATE FUNCTION prme.node_journal(user_id text, node_id uuid, max_count integer DEFAULT 1000)
RETURNS TABLE (
    id uuid,
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
    v_user_id text := prme._valid_user_id(node_journal.user_id);
BEGIN
    IF node_journal.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    IF node_journal.max_count IS NULL OR node_journal.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    -- The oldest max_count records: a chain verifies from its first record on.
    -- A memory whose records are all gone appears once with NULL record columns.
    RETURN QUERY
    SELECT n.id, n.version::bigint, n.last_checksum::text, j.node_version::bigint, j.record_version, j.op,
        j.operation_id, j.request_id, j.evidence_id, j.record, j.checksum::text, j.prev_checksum::text
    FROM prme.nodes AS n
    LEFT JOIN LATERAL (
        SELECT r.node_version, r.record_version, r.op, r.operation_id, r.request_id, r.evidence_id, r.record,
            r.checksum, r.prev_checksum
        FROM prme.journal AS r
        WHERE r.user_id = n.user_id AND r.node_id = n.id
        ORDER BY r.node_version
        LIMIT node_journal.max_count
    ) AS j ON TRUE
    WHERE n.user_id = v_user_id AND n.id = node_journal.node_id
    ORDER BY j.node_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
END;
$$;

COMMENT ON FUNCTION prme.node_journal(text, uuid, integer) IS
'The oldest max_count (1..10000) journal records of one memory of user_id with the memory''s head (version, '
'last_checksum), in chain order, for verification outside the database. PR404 for a missing or foreign memory.';

REVOKE ALL ON FUNCTION prme.node_journal(text, uuid, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.node_journal(text, uuid, integer) TO prme_app;

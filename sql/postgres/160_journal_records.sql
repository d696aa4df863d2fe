-- =============================================================================
-- prme-pg: journal_records (journal export)
--
-- The raw journal of one owner, with each node's head, so that a party outside
-- the database (prme_pg.journal, an auditor) can verify it independently. It is
-- an API function because prme_app has no table privileges.
-- =============================================================================

CREATE FUNCTION prme.journal_records(user_id text)
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
    SELECT n.id, n.version::bigint, n.last_checksum::text, j.node_version::bigint, j.record_version, j.op,
        j.operation_id, j.request_id, j.evidence_id, j.record, j.checksum::text, j.prev_checksum::text
    FROM prme.nodes AS n
    LEFT JOIN prme.journal AS j ON j.user_id = n.user_id AND j.node_id = n.id
    WHERE n.user_id = v_user_id
    UNION ALL
    SELECT j.node_id, NULL, NULL, j.node_version::bigint, j.record_version, j.op, j.operation_id,
        j.request_id, j.evidence_id, j.record, j.checksum::text, j.prev_checksum::text
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

REVOKE ALL ON FUNCTION prme.journal_records(text) FROM public;
GRANT EXECUTE ON FUNCTION prme.journal_records(text) TO prme_app;

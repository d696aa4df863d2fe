-- =============================================================================
-- prme-pg: archive_node
--
-- Archiving retires a memory: it can no longer be confirmed (reinforce treats it
-- as not found) but stays readable by its owner and in the journal.
-- =============================================================================

CREATE FUNCTION prme.archive_node(user_id text, node_id uuid)
RETURNS prme.node_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(archive_node.user_id);
    v_node prme.nodes;
    v_after prme.nodes;
    v_entry prme.journal;
BEGIN
    IF archive_node.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    SELECT n.* INTO v_node
    FROM prme.nodes AS n
    WHERE n.user_id = v_user_id AND n.id = archive_node.node_id
    FOR UPDATE;
    IF NOT FOUND OR v_node.lifecycle_state = 'archived' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;

    v_after := v_node;
    v_after.lifecycle_state := 'archived';
    v_after.updated_at := now();
    v_after.version := v_node.version + 1;
    v_entry := prme._journal_entry('archive', NULL, gen_random_uuid(), NULL, NULL, v_node, v_after);
    v_after.last_checksum := v_entry.checksum;

    UPDATE prme.nodes AS n SET
        lifecycle_state = v_after.lifecycle_state,
        updated_at = v_after.updated_at,
        version = v_after.version,
        last_checksum = v_after.last_checksum
    WHERE n.user_id = v_user_id AND n.id = archive_node.node_id;
    INSERT INTO prme.journal SELECT v_entry.*;

    RETURN prme._node_view(v_after, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.archive_node(text, uuid) IS
'Archives a memory of user_id and journals it. PR404 when it is missing, foreign or already archived.';

REVOKE ALL ON FUNCTION prme.archive_node(text, uuid) FROM public;
GRANT EXECUTE ON FUNCTION prme.archive_node(text, uuid) TO prme_app;

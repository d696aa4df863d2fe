-- =============================================================================
-- prme-pg: get_node and list_nodes (reads)
--
-- Reads show an owner's memories in every lifecycle state, archived included:
-- archiving retires a memory from confirmation and recall, not from its owner.
-- =============================================================================

CREATE FUNCTION prme.get_node(user_id text, node_id uuid)
RETURNS prme.node_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(get_node.user_id);
    v_node prme.nodes;
BEGIN
    IF get_node.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    SELECT * INTO v_node FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = get_node.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
    RETURN prme._node_view(v_node, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.get_node(text, uuid) IS
'Returns one memory of user_id. PR404 when it does not exist or belongs to another owner.';

CREATE FUNCTION prme.list_nodes(
    user_id text,
    namespace text DEFAULT NULL,
    after_node_id uuid DEFAULT NULL,
    max_count integer DEFAULT 100
)
RETURNS SETOF prme.node_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(list_nodes.user_id);
BEGIN
    IF list_nodes.namespace IS NOT NULL THEN
        PERFORM prme._valid_name('namespace', list_nodes.namespace);
    END IF;
    IF list_nodes.max_count IS NULL OR list_nodes.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    -- Keyset pagination over the primary key: pass the last id seen as after_node_id.
    RETURN QUERY
    SELECT (prme._node_view(n, FALSE)).*
    FROM prme.nodes AS n
    WHERE n.user_id = v_user_id
      AND (list_nodes.namespace IS NULL OR n.namespace = list_nodes.namespace)
      AND (list_nodes.after_node_id IS NULL OR n.id > list_nodes.after_node_id)
    ORDER BY n.id
    LIMIT list_nodes.max_count;
END;
$$;

COMMENT ON FUNCTION prme.list_nodes(text, text, uuid, integer) IS
'Pages through the memories of user_id in id order: pass the last id returned as after_node_id. '
'namespace filters when given; max_count is 1..10000.';

REVOKE ALL ON FUNCTION prme.get_node(text, uuid) FROM public;
GRANT EXECUTE ON FUNCTION prme.get_node(text, uuid) TO prme_app;
REVOKE ALL ON FUNCTION prme.list_nodes(text, text, uuid, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.list_nodes(text, text, uuid, integer) TO prme_app;

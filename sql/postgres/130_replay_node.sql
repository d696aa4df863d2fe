-- =============================================================================
-- prme-pg: replay_node
--
-- Rebuilds a node from its journal chain and compares the result with the stored
-- row. Reinforce records are re-derived from their before state with the policy
-- they name, so a record whose after does not follow from its rule is caught too.
-- =============================================================================

CREATE FUNCTION prme.replay_node(user_id text, node_id uuid)
RETURNS TABLE (records integer, matches boolean, problem text, stored jsonb, replayed jsonb)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(replay_node.user_id);
    v_node prme.nodes;
    v_record text;
    v_doc jsonb;
    v_state jsonb;
    v_expected jsonb;
    v_refs jsonb;
BEGIN
    IF replay_node.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    SELECT n.* INTO v_node FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = replay_node.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
    records := 0;
    stored := prme._node_state(v_node)::jsonb;

    FOR v_record IN
        SELECT j.record FROM prme.journal AS j
        WHERE j.user_id = v_user_id AND j.node_id = v_node.id
        ORDER BY j.node_version
    LOOP
        records := records + 1;
        v_doc := prme._parse_record(v_record);
        IF v_doc IS NULL THEN
            problem := format('record %s is not valid JSON', records);
            EXIT;
        END IF;
        IF (v_doc -> 'before') IS DISTINCT FROM coalesce(v_state, 'null'::jsonb) THEN
            problem := format('record %s: before differs from the state replayed so far', records);
            EXIT;
        END IF;
        IF v_doc ->> 'op' = 'reinforce' AND v_doc ->> 'policy' = 'additive_caps_v1' THEN
            v_refs := v_state -> 'evidence_refs';
            IF jsonb_typeof(v_doc -> 'evidence_id') = 'string' THEN
                v_refs := v_refs || jsonb_build_array(v_doc -> 'evidence_id');
            END IF;
            v_expected := v_state || jsonb_build_object(
                'reinforcement_boost', prme._reinforced_boost((v_state ->> 'reinforcement_boost')::numeric),
                'confidence_base', prme._reinforced_confidence((v_state ->> 'confidence_base')::numeric),
                'last_reinforced_at', v_doc -> 'recorded_at',
                'updated_at', v_doc -> 'recorded_at',
                'evidence_refs', v_refs,
                'version', (v_state ->> 'version')::bigint + 1
            );
            IF v_expected IS DISTINCT FROM (v_doc -> 'after') THEN
                problem := format('record %s: after does not follow from before under additive_caps_v1', records);
                EXIT;
            END IF;
        END IF;
        v_state := v_doc -> 'after';
    END LOOP;

    replayed := v_state;
    matches := problem IS NULL AND v_state IS NOT DISTINCT FROM stored;
    IF problem IS NULL AND NOT matches THEN
        problem := CASE WHEN v_state IS NULL THEN 'no journal records' ELSE 'stored row differs from replay' END;
    END IF;
    RETURN NEXT;
END;
$$;

COMMENT ON FUNCTION prme.replay_node(text, uuid) IS
'Rebuilds a memory of user_id from its journal (re-deriving reinforce records from their policy) and compares '
'it with the stored row: one row with matches, the first problem found, and both states. PR404 if not found.';

REVOKE ALL ON FUNCTION prme.replay_node(text, uuid) FROM public;
GRANT EXECUTE ON FUNCTION prme.replay_node(text, uuid) TO prme_app;

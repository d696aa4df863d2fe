-- Experiment 1 (measures a cost; not proposed as is): drop `SET search_path` from
-- every internal PL/pgSQL helper (prme._*, not SECURITY DEFINER, not a trigger).
--
-- A function with a SET clause runs through fmgr_security_definer on every call:
-- a new GUC nest level, the search_path string parsed and assigned, then restored
-- (AtEOXact_GUC), and the namespace search path recomputed by the next name lookup.
-- A fresh reinforce calls such helpers about 20 times (_valid_user_id, _key_replays
-- twice, _reinforced_*, _journal_entry, _journal_record_v2, _node_state twice,
-- _json_time nine times, _sha256_hex, _add_outcome, _outcome_weight, _node_view).
--
-- The helpers are granted to no one, so they only run inside the SECURITY DEFINER
-- API functions, which pin search_path = pg_catalog, pg_temp; a helper without SET
-- inherits exactly that. tests/pgtap/test_security.sql currently requires the SET
-- on every PL/pgSQL function, so adopting this means changing that rule.
DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    FOR v_fn IN
        SELECT p.oid::regprocedure FROM pg_proc AS p
        WHERE p.pronamespace = 'prme'::regnamespace
          AND p.proname LIKE '\_%'
          AND NOT p.prosecdef
          AND p.prorettype <> 'trigger'::regtype
          AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')
          AND p.proconfig IS NOT NULL
    LOOP
        EXECUTE format('ALTER FUNCTION %s RESET search_path', v_fn);
    END LOOP;
END
$$;

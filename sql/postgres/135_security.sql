-- =============================================================================
-- prme-pg: privileges and row-level security
--
-- prme_app executes the API functions and nothing else: no table privileges,
-- no internal helpers (names starting with _). prme_reader reads through
-- row-level security, one owner at a time, chosen with
--   SET prme.user_id = 'alice';
-- The API functions run as prme_owner (SECURITY DEFINER), which owns the tables
-- and so is not subject to these policies; they filter by owner themselves.
-- =============================================================================

REVOKE ALL ON ALL TABLES IN SCHEMA prme FROM public;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;

GRANT EXECUTE ON FUNCTION prme.add_node(text, text, text, text, text, numeric, numeric, text, text, timestamptz, uuid) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.add_event(text, text, text, text, text, jsonb, timestamptz, uuid) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.get_node(text, uuid) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.list_nodes(text, text, uuid, integer) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.reinforce(uuid, text, uuid, uuid) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.archive_node(text, uuid) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.verify_journal(text) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.replay_node(text, uuid) TO prme_app;

GRANT SELECT ON prme.nodes, prme.events, prme.journal TO prme_reader;

ALTER TABLE prme.nodes ENABLE ROW LEVEL SECURITY;
ALTER TABLE prme.events ENABLE ROW LEVEL SECURITY;
ALTER TABLE prme.journal ENABLE ROW LEVEL SECURITY;
ALTER TABLE prme.request_keys ENABLE ROW LEVEL SECURITY;

CREATE POLICY nodes_reader_owner ON prme.nodes FOR SELECT TO prme_reader
USING (user_id = current_setting('prme.user_id', TRUE));
CREATE POLICY events_reader_owner ON prme.events FOR SELECT TO prme_reader
USING (user_id = current_setting('prme.user_id', TRUE));
CREATE POLICY journal_reader_owner ON prme.journal FOR SELECT TO prme_reader
USING (user_id = current_setting('prme.user_id', TRUE));

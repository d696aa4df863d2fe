-- =============================================================================
-- prme-pg: privileges and row-level security
--
-- prme_app executes the API functions and nothing else: no table privileges,
-- no internal helpers (names starting with _). prme_reader reads through
-- row-level security the rows of the owners bound to the reading role:
--   GRANT prme_reader TO alice_audit;
--   INSERT INTO prme.reader_bindings (user_id, reader) VALUES ('alice', 'alice_audit');
-- A binding holds for every role that has the privileges of the bound role
-- (pg_has_role ... 'USAGE', the rule table privileges follow), so it can name a
-- login role or a group. prme_auditor reads every owner's rows: an explicit grant,
-- never implied. No setting a session can change widens what a reader sees.
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

GRANT SELECT ON prme.nodes, prme.events, prme.journal TO prme_reader, prme_auditor;

ALTER TABLE prme.nodes ENABLE ROW LEVEL SECURITY;
ALTER TABLE prme.events ENABLE ROW LEVEL SECURITY;
ALTER TABLE prme.journal ENABLE ROW LEVEL SECURITY;
ALTER TABLE prme.request_keys ENABLE ROW LEVEL SECURITY;

-- The bound owners as an array built once per query (an InitPlan), which an index
-- on user_id can use, rather than a subquery tested row by row.
CREATE POLICY nodes_reader_owner ON prme.nodes FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY events_reader_owner ON prme.events FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY journal_reader_owner ON prme.journal FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY nodes_auditor_all ON prme.nodes FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY events_auditor_all ON prme.events FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY journal_auditor_all ON prme.journal FOR SELECT TO prme_auditor USING (TRUE);

-- =============================================================================
-- prme-pg: privileges and reader bindings
--
-- prme_app executes the API functions and nothing else: no table privileges,
-- no internal helpers (names starting with _). Each API function's file revokes
-- EXECUTE on it from PUBLIC and grants it to prme_app.
--
-- prme_reader reads through row-level security the rows of the owners bound to
-- the reading role:
--   GRANT prme_reader TO alice_audit;
--   INSERT INTO prme.reader_bindings (user_id, reader) VALUES ('alice', 'alice_audit');
-- A binding holds for every role that has the privileges of the bound role
-- (pg_has_role ... 'USAGE', the rule table privileges follow), so it can name a
-- login role or a group. prme_auditor reads every owner's rows: an explicit grant,
-- never implied. No setting a session can change widens what a reader sees.
--
-- Each owner's table enables row-level security in its own file; a table the
-- readers may read also grants them SELECT there, with two policies:
--   <table>_reader_owner  prme_reader: user_id is one of the owners bound to it
--   <table>_auditor_all   prme_auditor: every row
-- The reader policy builds the bound owners as an array once per query (an
-- InitPlan), which an index on user_id can use, rather than a subquery tested
-- row by row. Not readable: schema_migrations, request_keys (idempotency
-- internals), api_tokens (credentials), owner_streams and
-- imported_operation_events (what an owner's move between servers wrote).
-- The API functions run as prme_owner (SECURITY DEFINER), which owns the tables
-- and so is not subject to these policies; they filter by owner themselves.
-- =============================================================================

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

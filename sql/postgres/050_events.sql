-- =============================================================================
-- prme-pg: events (evidence)
--
-- Immutable evidence that memories cite: what was said or observed, when, and in
-- which scope. A memory may only be confirmed by evidence of its own owner and scope.
-- =============================================================================

CREATE TABLE prme.events (
    id uuid NOT NULL,
    user_id text NOT NULL,
    namespace text NOT NULL DEFAULT 'default' CHECK (namespace ~ '^[a-z][a-z0-9_-]{0,62}$'),
    scope text NOT NULL DEFAULT 'personal' CHECK (scope ~ '^[a-z][a-z0-9_-]{0,62}$'),
    kind text NOT NULL DEFAULT 'message' CHECK (kind ~ '^[a-z][a-z0-9_-]{0,62}$'),
    content text NOT NULL,
    payload jsonb NOT NULL DEFAULT '{}',
    occurred_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (user_id, id)
);

COMMENT ON TABLE prme.events IS
'Immutable evidence (messages, observations) that confirmations cite. Updates and deletes are refused.';

CREATE TRIGGER events_append_only
BEFORE UPDATE OR DELETE ON prme.events
FOR EACH ROW EXECUTE FUNCTION prme._refuse_change();

CREATE TRIGGER events_no_truncate
BEFORE TRUNCATE ON prme.events
FOR EACH STATEMENT EXECUTE FUNCTION prme._refuse_change();

-- Readers: prme_reader the rows of the owners bound to it, prme_auditor every row
-- (015_reader_bindings.sql).
ALTER TABLE prme.events ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON prme.events FROM public;
GRANT SELECT ON prme.events TO prme_reader, prme_auditor;
CREATE POLICY events_reader_owner ON prme.events FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY events_auditor_all ON prme.events FOR SELECT TO prme_auditor USING (TRUE);

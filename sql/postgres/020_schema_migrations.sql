-- =============================================================================
-- prme-pg: schema_migrations
--
-- One row per applied migration file. A migration records itself in its last
-- statement, so `psql -1 -f NNNN_x.sql` and `prme-pg migrate` leave the same trace.
-- sha256 is the hash of the file's body (everything above its seal line); the
-- runner refuses a database whose recorded hash no longer matches the file.
-- =============================================================================

CREATE TABLE prme.schema_migrations (
    version integer PRIMARY KEY CHECK (version > 0),
    name text NOT NULL CHECK (name ~ '^[a-z0-9_]+$'),
    sha256 text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    applied_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);

COMMENT ON TABLE prme.schema_migrations IS
'Applied migrations: version and name from the file name, sha256 of the file body.';

-- Read by the migration runner as prme_owner; no other role reads it.
REVOKE ALL ON prme.schema_migrations FROM public;

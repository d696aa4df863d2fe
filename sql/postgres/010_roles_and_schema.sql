-- =============================================================================
-- prme-pg: roles and schema
--
-- Four cluster-wide roles, created only when missing (roles outlive databases):
--   prme_owner    owns every prme object; NOLOGIN.
--   prme_app      USAGE on the schema, EXECUTE on API functions; no table access.
--   prme_reader   SELECT through row-level security: the owners bound to the role
--                 in prme.reader_bindings (015_reader_bindings.sql).
--   prme_auditor  SELECT on the same tables, every owner's rows.
-- Everything after this file is created as prme_owner (SET LOCAL ROLE), so the
-- SECURITY DEFINER functions run with exactly the owner's rights.
-- =============================================================================

DO $roles$
DECLARE
    v_role text;
BEGIN
    IF pg_catalog.getdatabaseencoding() <> 'UTF8' THEN
        RAISE EXCEPTION 'prme-pg needs a UTF8 database, this one is %', pg_catalog.getdatabaseencoding()
            USING HINT = 'CREATE DATABASE ... ENCODING ''UTF8'' TEMPLATE template0';
    END IF;
    FOREACH v_role IN ARRAY ARRAY['prme_owner', 'prme_app', 'prme_reader', 'prme_auditor'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = v_role) THEN
            BEGIN
                EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_role);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created concurrently by a migration in another database
            END;
        END IF;
    END LOOP;
END
$roles$;

CREATE SCHEMA prme AUTHORIZATION prme_owner;
COMMENT ON SCHEMA prme IS 'prme-pg: a memory engine for AI agents. API functions are granted to prme_app.';

REVOKE ALL ON SCHEMA prme FROM public;
GRANT USAGE ON SCHEMA prme TO prme_app, prme_reader, prme_auditor;

-- pgvector, when the server has it: recall by meaning (305_embeddings.sql). Without it
-- (or with prme.vector_search = off in the session that migrates) everything else is
-- the same and recall matches words only. Created by the superuser that migrates, in the
-- session's creation schema; an existing installation is used wherever it is.
DO $vector$
BEGIN
    IF coalesce(current_setting('prme.vector_search', TRUE), '') <> 'off'
       AND EXISTS (SELECT FROM pg_catalog.pg_available_extensions WHERE name = 'vector') THEN
        CREATE EXTENSION IF NOT EXISTS vector;
    END IF;
END
$vector$;

SET LOCAL ROLE prme_owner;

-- Functions are executable by PUBLIC unless revoked, and that global default can
-- only be changed without IN SCHEMA. So no function prme_owner creates, internal
-- helpers included, is executable by PUBLIC unless granted (the pgTAP security
-- tests check every function of the schema).
ALTER DEFAULT PRIVILEGES FOR ROLE prme_owner REVOKE EXECUTE ON FUNCTIONS FROM public;

-- prme-pg migration 0002_service_api: what services need besides the core --
-- bearer tokens (sha256 only) per owner, readiness, and the journal export.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/140_api_tokens.sql

-- =============================================================================
-- prme-pg: api_tokens (HTTP bearer tokens)
--
-- A token maps to exactly one owner. Only the sha256 of a token is stored. The
-- token text names its owner (prme.<base64url(user_id)>.<secret>), so a lookup
-- leads with user_id like every other key in prme, and the table stays
-- shardable by owner. Tokens are minted by the caller (prme-pg token create),
-- which prints them once.
-- =============================================================================

CREATE TABLE prme.api_tokens (
    user_id text NOT NULL,
    token_sha256 text NOT NULL CHECK (token_sha256 ~ '^[0-9a-f]{64}$'),
    label text NOT NULL DEFAULT '' CHECK (length(label) <= 200),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    revoked_at timestamptz,
    PRIMARY KEY (user_id, token_sha256)
);

COMMENT ON TABLE prme.api_tokens IS
'HTTP bearer tokens: the sha256 of each token and the one owner it acts for. Tokens themselves are never stored.';

CREATE FUNCTION prme._valid_token_sha256(token_sha256 text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF token_sha256 IS NULL OR token_sha256 !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'token_sha256 must be 64 lowercase hex digits';
    END IF;
    RETURN token_sha256;
END;
$$;

COMMENT ON FUNCTION prme._valid_token_sha256(text) IS
'Internal: returns token_sha256 when it is 64 lowercase hex digits, else raises PR422.';

CREATE FUNCTION prme.create_api_token(user_id text, token_sha256 text, label text DEFAULT '')
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_created_at timestamptz;
BEGIN
    IF create_api_token.label IS NULL OR length(create_api_token.label) > 200
       OR create_api_token.label ~ '[\x01-\x1f\x7f-\x9f]' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'label must be at most 200 characters, no control characters';
    END IF;
    INSERT INTO prme.api_tokens (user_id, token_sha256, label)
    VALUES (
        prme._valid_user_id(create_api_token.user_id),
        prme._valid_token_sha256(create_api_token.token_sha256),
        create_api_token.label
    )
    ON CONFLICT DO NOTHING
    RETURNING created_at INTO v_created_at;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR409', MESSAGE = 'this token is already registered';
    END IF;
    RETURN v_created_at;
END;
$$;

COMMENT ON FUNCTION prme.create_api_token(text, text, text) IS
'Registers the sha256 of a new bearer token for user_id (the caller generated the token and shows it once). '
'Returns its creation time; PR409 if that hash is already registered.';

CREATE FUNCTION prme.revoke_api_token(user_id text, token_sha256 text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    UPDATE prme.api_tokens AS t SET revoked_at = now()
    WHERE t.user_id = prme._valid_user_id(revoke_api_token.user_id)
      AND t.token_sha256 = prme._valid_token_sha256(revoke_api_token.token_sha256)
      AND t.revoked_at IS NULL;
    RETURN FOUND;
END;
$$;

COMMENT ON FUNCTION prme.revoke_api_token(text, text) IS
'Revokes a bearer token of user_id by its sha256. Returns false when no live token matched.';

CREATE FUNCTION prme.authenticate_api_token(user_id text, token_sha256 text)
RETURNS boolean
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- Malformed input is simply not a live token: authentication answers yes or no.
    RETURN EXISTS (
        SELECT FROM prme.api_tokens AS t
        WHERE t.user_id = authenticate_api_token.user_id
          AND t.token_sha256 = authenticate_api_token.token_sha256
          AND t.revoked_at IS NULL
    );
END;
$$;

COMMENT ON FUNCTION prme.authenticate_api_token(text, text) IS
'True when token_sha256 is a live (unrevoked) bearer token of user_id.';

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;
GRANT EXECUTE ON FUNCTION prme.create_api_token(text, text, text) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.revoke_api_token(text, text) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.authenticate_api_token(text, text) TO prme_app;
ALTER TABLE prme.api_tokens ENABLE ROW LEVEL SECURITY;

-- >>> sql/postgres/150_readiness.sql

-- =============================================================================
-- prme-pg: readiness
--
-- What a service needs to know before it takes traffic: can this database take
-- writes, and which migrations does it have. Granted to prme_app, which has no
-- table privileges of its own.
-- =============================================================================

CREATE FUNCTION prme.readiness()
RETURNS TABLE (accepts_writes boolean, applied_migrations text[])
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT
        NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off',
        coalesce(
            (SELECT array_agg(format('%s:%s', m.version, m.sha256) ORDER BY m.version)
             FROM prme.schema_migrations AS m),
            '{}'
        );
END;
$$;

COMMENT ON FUNCTION prme.readiness() IS
'Whether this session can write (not a standby, not read-only) and the applied migrations as version:sha256.';

REVOKE ALL ON FUNCTION prme.readiness() FROM public;
GRANT EXECUTE ON FUNCTION prme.readiness() TO prme_app;

-- >>> sql/postgres/160_journal_records.sql

-- =============================================================================
-- prme-pg: journal_records (journal export)
--
-- The raw journal of one owner, with each node's head, so that a party outside
-- the database (prme_pg.journal, an auditor) can verify it independently. It is
-- an API function because prme_app has no table privileges.
-- =============================================================================

CREATE FUNCTION prme.journal_records(user_id text)
RETURNS TABLE (
    node_id uuid,
    version bigint,
    last_checksum text,
    node_version bigint,
    record_version smallint,
    op text,
    operation_id uuid,
    request_id uuid,
    evidence_id uuid,
    record text,
    checksum text,
    prev_checksum text
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(journal_records.user_id);
BEGIN
    -- One row per record; a node without records appears once with NULL record columns.
    RETURN QUERY
    SELECT n.id, n.version, n.last_checksum, j.node_version, j.record_version, j.op, j.operation_id,
        j.request_id, j.evidence_id, j.record, j.checksum, j.prev_checksum
    FROM prme.nodes AS n
    LEFT JOIN prme.journal AS j ON j.user_id = n.user_id AND j.node_id = n.id
    WHERE n.user_id = v_user_id
    ORDER BY n.id, j.node_version;
END;
$$;

COMMENT ON FUNCTION prme.journal_records(text) IS
'Every journal record of user_id with its node''s head (version, last_checksum), in chain order, for '
'verification outside the database. Nodes without records appear once with NULL record columns.';

REVOKE ALL ON FUNCTION prme.journal_records(text) FROM public;
GRANT EXECUTE ON FUNCTION prme.journal_records(text) TO prme_app;
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (2, 'service_api', '9f54a0a854bd5cdc8980be29907c658d25ce4861a2a2c200b3f6f35795878a7b');

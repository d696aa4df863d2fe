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

-- No role but prme_owner reads tokens: row-level security without a policy.
ALTER TABLE prme.api_tokens ENABLE ROW LEVEL SECURITY;

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
       OR create_api_token.label ~ E'[\\x01-\\x1f\\x7f-\\x9f]' THEN
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

REVOKE ALL ON FUNCTION prme.create_api_token(text, text, text) FROM public;
GRANT EXECUTE ON FUNCTION prme.create_api_token(text, text, text) TO prme_app;
REVOKE ALL ON FUNCTION prme.revoke_api_token(text, text) FROM public;
GRANT EXECUTE ON FUNCTION prme.revoke_api_token(text, text) TO prme_app;
REVOKE ALL ON FUNCTION prme.authenticate_api_token(text, text) FROM public;
GRANT EXECUTE ON FUNCTION prme.authenticate_api_token(text, text) TO prme_app;

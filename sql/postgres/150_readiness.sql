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

-- =============================================================================
-- prme-pg: argument validation
--
-- Each helper returns its argument unchanged or raises PR422, so API functions
-- validate with a plain assignment (`v_x := prme._valid_x(x)`), which PL/pgSQL
-- evaluates on its fast path without running a query.
--
-- Every literal with a backslash, here and in every module, is an E'...' literal
-- with the backslashes doubled: PL/pgSQL parses a body in the caller's session, and
-- only an E'' literal means the same under standard_conforming_strings = off.
-- =============================================================================

CREATE FUNCTION prme._valid_user_id(user_id text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Control characters are Unicode's Cc set, U+0000-U+001F and U+007F-U+009F, spelt
    -- out: [[:cntrl:]] depends on the database locale.
    IF user_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'user_id must not be null';
    END IF;
    IF length(user_id) NOT BETWEEN 1 AND 256 OR user_id ~ E'[\\x01-\\x1f\\x7f-\\x9f]' OR user_id <> btrim(user_id) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'user_id must be 1 to 256 characters without control characters or surrounding spaces';
    END IF;
    RETURN user_id;
END;
$$;

COMMENT ON FUNCTION prme._valid_user_id(text) IS
'Internal: returns user_id, or raises PR422 when it is null, empty, longer than 256 characters, '
'or has control characters or surrounding spaces.';

CREATE FUNCTION prme._valid_name(argument text, value text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL OR value !~ '^[a-z][a-z0-9_-]{0,62}$' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('%s must match ^[a-z][a-z0-9_-]{0,62}$', argument),
            DETAIL = format('got %s', coalesce(quote_literal(left(value, 80)), 'NULL'));
    END IF;
    RETURN value;
END;
$$;

COMMENT ON FUNCTION prme._valid_name(text, text) IS
'Internal: returns value when it is a valid scope, namespace or kind (^[a-z][a-z0-9_-]{0,62}$), else raises PR422.';

CREATE FUNCTION prme._valid_content(content text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- An explicit set of blanks: the same in every locale, and in the DuckDB port.
    IF content IS NULL OR btrim(content, E' \t\n\r\f\x0b') = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'content must not be empty';
    END IF;
    IF octet_length(content) > 65536 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'content must be at most 65536 bytes',
            DETAIL = format('got %s bytes', octet_length(content));
    END IF;
    RETURN content;
END;
$$;

COMMENT ON FUNCTION prme._valid_content(text) IS
'Internal: returns content when it is non-blank and at most 64 KiB of UTF-8, else raises PR422.';

CREATE FUNCTION prme._valid_fraction(argument text, value numeric)
RETURNS numeric
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- 'NaN'::numeric compares greater than every number, so the range test rejects it too.
    IF value IS NULL OR NOT (value >= 0 AND value <= 1) OR scale(value) > 4 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('%s must be a number in [0, 1] with at most 4 decimal places', argument),
            DETAIL = format('got %s', coalesce(value::text, 'NULL'));
    END IF;
    RETURN value;
END;
$$;

COMMENT ON FUNCTION prme._valid_fraction(text, numeric) IS
'Internal: returns value when it is in [0, 1] with at most 4 decimals (numeric(5,4) holds it exactly), else PR422.';

CREATE FUNCTION prme._valid_timestamp(argument text, value timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Journal records spell timestamps as YYYY-MM-DDTHH:MM:SS.ffffffZ: four-digit years only.
    IF value IS NOT NULL
       AND NOT (value >= '0001-01-01 00:00:00+00' AND value < '10000-01-01 00:00:00+00') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('%s must be a finite time between years 1 and 9999', argument),
            DETAIL = format('got %s', value);
    END IF;
    RETURN value;
END;
$$;

COMMENT ON FUNCTION prme._valid_timestamp(text, timestamptz) IS
'Internal: returns value (NULL allowed) when it is finite and within years 1..9999, else raises PR422.';

CREATE FUNCTION prme._valid_scopes(scopes text[])
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_scope text;
    v_result text[] := '{}'::text[];
BEGIN
    IF scopes IS NULL THEN
        RETURN NULL;
    END IF;
    IF cardinality(scopes) NOT BETWEEN 1 AND 100 OR array_ndims(scopes) <> 1 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'scopes must be a one-dimensional array of 1 to 100 scopes',
            DETAIL = format('got %s elements', cardinality(scopes));
    END IF;
    FOREACH v_scope IN ARRAY scopes LOOP
        v_scope := prme._valid_name('scope', v_scope);
        IF NOT v_scope = ANY (v_result) THEN
            v_result := v_result || v_scope;
        END IF;
    END LOOP;
    RETURN v_result;
END;
$$;

COMMENT ON FUNCTION prme._valid_scopes(text[]) IS
'Internal: NULL stays NULL; otherwise 1..100 valid scope names, returned without duplicates in first-seen order. '
'Anything else raises PR422.';

CREATE FUNCTION prme._valid_ref(argument text, value text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- An explicit control-character set (C0, DEL, C1): [[:cntrl:]] depends on the locale.
    IF value IS NOT NULL
       AND (length(value) NOT BETWEEN 1 AND 256 OR value ~ E'[\\x01-\\x1f\\x7f-\\x9f]' OR value <> btrim(value)) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('%s must be 1 to 256 characters without control characters or surrounding spaces',
                argument);
    END IF;
    RETURN value;
END;
$$;

COMMENT ON FUNCTION prme._valid_ref(text, text) IS
'Internal: returns value (NULL allowed) when it is a valid external reference such as profile_id or thread_id '
'(1 to 256 characters, no control characters or surrounding spaces), else raises PR422.';

CREATE FUNCTION prme._valid_notes(notes text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF octet_length(notes) > 65536 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'notes must be at most 65536 bytes',
            DETAIL = format('got %s bytes', octet_length(notes));
    END IF;
    RETURN notes;
END;
$$;

COMMENT ON FUNCTION prme._valid_notes(text) IS
'Internal: returns notes (NULL allowed) when it is at most 64 KiB of UTF-8, else raises PR422.';

-- The four outcome kinds are those prme._outcome_weight (210_outcomes.sql) weighs.
CREATE FUNCTION prme._valid_outcome(outcome text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF prme._outcome_weight(outcome) IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'outcome must be explicit_reinforcement, implicit_success, neutral_exposure or explicit_correction',
            DETAIL = format('got %s', coalesce(quote_literal(left(outcome, 80)), 'NULL'));
    END IF;
    RETURN outcome;
END;
$$;

COMMENT ON FUNCTION prme._valid_outcome(text) IS
'Internal: returns outcome when it is one of the four outcome kinds, else raises PR422.';

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

CREATE FUNCTION prme._operation_id(operation_id text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- 1 to 128 characters of a path-safe alphabet (docs/LEDGER.md, "Compatibility").
    -- A UUID is one id whatever its text form -- 8-4-4-4-12 or 32 hex digits, with or without
    -- "urn:uuid:", any case -- stored as lowercase 8-4-4-4-12, as the ledger stored UUID ids
    -- before ids were text, so a retry in any form finds its operation.
    IF operation_id IS NULL OR operation_id !~ '^[A-Za-z0-9._:-]{1,128}$' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'an operation id must be 1 to 128 characters of A-Z, a-z, 0-9, ".", "_", ":" and "-"',
            DETAIL = format('got %s', coalesce(quote_literal(left(operation_id, 80)), 'NULL'));
    END IF;
    IF operation_id ~* '^(urn:uuid:)?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$' THEN
        RETURN regexp_replace(operation_id, '^urn:uuid:', '', 'i')::uuid::text;
    END IF;
    RETURN operation_id;
END;
$$;

COMMENT ON FUNCTION prme._operation_id(text) IS
'Internal: an operation id as the ledger stores it (a UUID, in any of its text forms, as lowercase 8-4-4-4-12; '
'any other id as given); PR422 unless '
'it is 1 to 128 characters of A-Z a-z 0-9 . _ : -.';

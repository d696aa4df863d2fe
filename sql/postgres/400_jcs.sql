-- =============================================================================
-- prme-pg: canonical JSON (RFC 8785) and name-based UUIDs (RFC 4122 version 5)
--
-- The operations ledger identifies a payload by the sha256 of its RFC 8785 (JCS)
-- form, recomputed here so that the database never trusts a client's hash. The
-- rules, as the Python rfc8785 package applies them:
--   * object members sorted by the UTF-16 code units of their keys (not by code
--     points: U+E000..U+FFFF sort after the surrogate pairs of U+10000 and up);
--   * strings escaped minimally: \" \\ \b \f \n \r \t, other controls as \u00xx;
--   * numbers as IEEE 754 doubles, written the way ECMAScript's Number::toString
--     writes them (shortest round-trip digits; 1e-7 and 1e+21 in exponent form,
--     0.000001 and 100000000000000000000 without). jsonb keeps numbers as exact
--     numerics: an integer within 2^53 is written as is, anything else goes
--     through float8, whose text output (extra_float_digits = 1) is the shortest
--     round-trip digits and is only re-formatted here. A number out of double
--     range (including one that would round to zero) is PR422, and so is a
--     number whose canonical text, read back as a decimal, is not the number
--     itself (0.10000000000000000001 -> "0.1", 2^53 + 1 -> "9007199254740992"):
--     otherwise two payloads the executor reads differently (it reads exact
--     numerics) would share one payload_hash. One hash, one payload.
-- Nesting is bounded too (prme._json_too_deep, 32 levels as in
-- prme.ledger_limits()), before anything recurses into the value.
-- jsonb cannot hold duplicate keys, NUL characters or lone surrogates, so the
-- input is already I-JSON; the caller's jsonb cast reports those.
--
-- prme.derived_id(operation_id) is a uuid v5 (prme._uuid_v5, 025_helpers.sql):
-- uuid5(473adea8-cd69-5ad2-b4b4-e329cd93d1ff, lowercase text of operation_id);
-- in Python: uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_URL, 'urn:prme-pg:operations'),
-- str(operation_id)).
-- =============================================================================

-- The common helpers used here (prme._sha1, prme._uuid_v5, prme._sha256_hex) are
-- in 025_helpers.sql.

CREATE FUNCTION prme.derived_id(operation_id text)
RETURNS uuid
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The id as the ledger stores it: a UUID in lowercase, so a UUID id derives the
    -- same id it did when ids were uuid (PR422 for what is no operation id).
    RETURN prme._uuid_v5('473adea8-cd69-5ad2-b4b4-e329cd93d1ff', prme._operation_id(operation_id));
END;
$$;

COMMENT ON FUNCTION prme.derived_id(text) IS
'The id of the memory (add_node, add_memory) or event (add_event) that an operation creates: '
'uuid5(uuid5(NAMESPACE_URL, ''urn:prme-pg:operations''), operation_id as stored: a UUID in lowercase), so '
'callers know it in advance.';

CREATE FUNCTION prme._jcs_double(value float8)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
SET extra_float_digits = 1
AS $$
DECLARE
    v_abs float8 := abs(value);
    v_parts text[];
    v_digits text;
    v_trimmed text;
    v_point integer;
    v_count integer;
    v_length integer;
    v_down text;
    v_up text;
    v_up_point integer;
    v_down_ok boolean;
    v_up_ok boolean;
    v_exact numeric;
    v_below numeric;
    v_above numeric;
    v_sign text := CASE WHEN value < 0 THEN '-' ELSE '' END;
BEGIN
    IF value = 0 THEN
        RETURN '0';
    END IF;
    -- float8out with extra_float_digits > 0 writes round-trip digits as
    -- D[.DDD][e+-XX]: value = 0.DIGITS * 10^v_point, DIGITS without leading or
    -- trailing zeros.
    v_parts := regexp_match(v_abs::text, E'^([0-9]+)(?:\\.([0-9]+))?(?:e([-+][0-9]+))?$');
    v_digits := v_parts[1] || coalesce(v_parts[2], '');
    v_point := length(v_parts[1]) + coalesce(v_parts[3]::integer, 0);
    v_trimmed := ltrim(v_digits, '0');
    v_point := v_point - (length(v_digits) - length(v_trimmed));
    v_digits := rtrim(v_trimmed, '0');

    -- PostgreSQL's Ryu leaves out the two halfway points to the neighbouring
    -- doubles (it does not accept bounds); ECMAScript and Python count them, since
    -- a tie rounds to the even mantissa. Only such a halfway point can be shorter
    -- than PostgreSQL's digits, and it is then the digits cut or cut and rounded
    -- up: try shorter lengths while one of the two still reads back as value.
    v_length := length(v_digits) - 1;
    WHILE v_length >= 1 LOOP
        v_down := left(v_digits, v_length);
        v_up := (v_down::numeric + 1)::text;
        v_up_point := v_point + length(v_up) - v_length;
        v_down_ok := ('0.' || v_down || 'e' || v_point)::float8 = v_abs;
        v_up_ok := ('0.' || v_up || 'e' || v_up_point)::numeric <= 1.7976931348623158e308
            AND ('0.' || v_up || 'e' || v_up_point)::float8 = v_abs;
        IF v_down_ok AND v_up_ok THEN
            -- Both halfway points: the one nearer the digits found, on a tie the even one.
            v_exact := ('0.' || v_digits || 'e' || v_point)::numeric;
            v_below := v_exact - ('0.' || v_down || 'e' || v_point)::numeric;
            v_above := ('0.' || v_up || 'e' || v_up_point)::numeric - v_exact;
            v_down_ok := v_below < v_above OR (v_below = v_above AND right(v_down, 1)::integer % 2 = 0);
        END IF;
        IF v_down_ok THEN
            v_digits := rtrim(v_down, '0');
        ELSIF v_up_ok THEN
            v_digits := rtrim(v_up, '0');
            v_point := v_up_point;
        ELSE
            EXIT;
        END IF;
        v_length := least(v_length, length(v_digits)) - 1;
    END LOOP;

    v_count := length(v_digits);
    -- ECMA-262 Number::toString(10) for k = v_count digits and n = v_point.
    IF v_count <= v_point AND v_point <= 21 THEN
        RETURN v_sign || v_digits || repeat('0', v_point - v_count);
    ELSIF 0 < v_point AND v_point <= 21 THEN
        RETURN v_sign || left(v_digits, v_point) || '.' || substr(v_digits, v_point + 1);
    ELSIF -6 < v_point AND v_point <= 0 THEN
        RETURN v_sign || '0.' || repeat('0', -v_point) || v_digits;
    END IF;
    RETURN v_sign || left(v_digits, 1)
        || CASE WHEN v_count > 1 THEN '.' || substr(v_digits, 2) ELSE '' END
        || 'e' || CASE WHEN v_point > 0 THEN '+' ELSE '-' END || abs(v_point - 1)::text;
END;
$$;

COMMENT ON FUNCTION prme._jcs_double(float8) IS
'Internal: a finite double as ECMAScript''s Number::toString writes it (RFC 8785 3.2.2.3): the shortest digits '
'that read back as the same double, ties between neighbours counted as ECMAScript counts them.';

CREATE FUNCTION prme._jcs_number(value numeric)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text text;
BEGIN
    -- 1. Integers that a double holds exactly: their own digits (the common case).
    IF value = trunc(value) AND abs(value) <= 9007199254740992 THEN
        RETURN trunc(value)::text;
    END IF;
    -- 2. At most 15 significant digits (DBL_DIG) and 1e-6 <= |value| < 1e21: the
    -- decimal survives a round trip through a double, so it is the shortest form,
    -- and ECMAScript writes it without an exponent: numeric's own text, trailing
    -- zeros cut.
    IF abs(value) >= 0.000001 AND abs(value) < 1e21 THEN
        v_text := trim_scale(value)::text;
        IF length(ltrim(translate(v_text, '-.', ''), '0')) <= 15 THEN
            RETURN v_text;
        END IF;
    END IF;
    -- 3. Everything else through float8. Out of range means a result of infinity
    -- or an underflow to zero, which the cast refuses; only extreme magnitudes
    -- pay for the subtransaction that catches it.
    IF abs(value) > 1e300 OR abs(value) < 1e-300 THEN
        BEGIN
            v_text := prme._jcs_double(value::float8);
        EXCEPTION WHEN numeric_value_out_of_range THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422',
                MESSAGE = 'a JSON number is out of the range of an IEEE 754 double',
                DETAIL = format('got %s', btrim(to_char(value, '9.9EEEE')));
        END;
    ELSE
        v_text := prme._jcs_double(value::float8);
    END IF;
    -- The canonical text must denote the number itself (rules 1 and 2 hold by
    -- construction): a decimal between two doubles would share its hash with the
    -- double's own digits.
    IF v_text::numeric <> value THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'a JSON number has no exact IEEE 754 double form',
            DETAIL = format('%s would be hashed as %s; send the number as a string to keep every digit',
                left(value::text, 40), v_text);
    END IF;
    RETURN v_text;
END;
$$;

COMMENT ON FUNCTION prme._jcs_number(numeric) IS
'Internal: a JSON number in RFC 8785 form (the ECMAScript text of the nearest double); PR422 when it is out of '
'double range or that text does not denote the number exactly.';

CREATE FUNCTION prme._json_too_deep(value jsonb)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    -- The value itself is level 1 and each object or array inside it one more
    -- ({"a": [1]} is 2 deep): deeper than 32 means an object or array at path
    -- level 32 (jsonpath counts the value itself as level 0). Iterative in C;
    -- prme.submit_operation writes the same test inline.
    SELECT jsonb_path_exists(value, 'strict $.**{32} ? (@.type() == "object" || @.type() == "array")');
$$;

COMMENT ON FUNCTION prme._json_too_deep(jsonb) IS
'Internal: whether a JSON value nests deeper than 32 levels (the value is level 1; prme.ledger_limits()).';

CREATE FUNCTION prme._jcs_key_order(key text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Byte order of UTF-8 (COLLATE "C") is code point order; UTF-16 code-unit
    -- order differs only in putting U+E000..U+FFFF after every astral character.
    -- Prefixing those with U+10FFFF (and U+10FFFF itself with U+10FFFF U+0001)
    -- makes code point order agree with UTF-16 order. prme._jcs calls this only
    -- for keys with a character from U+E000 up; any other key is its own sort key.
    RETURN regexp_replace(
        replace(key, E'\U0010FFFF', E'\U0010FFFF\u0001'),
        E'([\\uE000-\\uFFFF])', E'\U0010FFFF\\1', 'g'
    );
END;
$$;

COMMENT ON FUNCTION prme._jcs_key_order(text) IS
'Internal: a sort key whose COLLATE "C" order is the UTF-16 code-unit order of object keys (RFC 8785 3.2.3).';

CREATE FUNCTION prme._jcs(value jsonb)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    CASE jsonb_typeof(value)
        WHEN 'object' THEN
            RETURN '{' || coalesce((
                SELECT string_agg(
                    to_json(e.key)::text || ':' || CASE jsonb_typeof(e.value)
                        WHEN 'number' THEN CASE
                            -- The common case inline (no call): see the array branch.
                            WHEN e.value::text ~ E'^-?(0|[1-9][0-9]*)(\\.[0-9]*[1-9])?$'
                                AND length(translate(e.value::text, '-.', '')) <= 15
                                AND e.value::text !~ E'^-?0\\.00000' THEN e.value::text
                            ELSE prme._jcs_number(e.value::numeric)
                        END
                        WHEN 'object' THEN prme._jcs(e.value)
                        WHEN 'array' THEN prme._jcs(e.value)
                        ELSE e.value::text
                    END,
                    ',' ORDER BY CASE
                        WHEN e.key ~ E'[\\uE000-\\U0010FFFF]' THEN prme._jcs_key_order(e.key) ELSE e.key
                    END COLLATE "C"
                )
                FROM jsonb_each(value) AS e
            ), '') || '}';
        WHEN 'array' THEN
            RETURN '[' || coalesce((
                SELECT string_agg(
                    CASE jsonb_typeof(e.value)
                        WHEN 'number' THEN CASE
                            -- The common case inline, without calling _jcs_number: at most
                            -- 15 digits, no trailing fractional zero, at least 1e-5. Such a
                            -- number is exact or round-trips through a double, so its own
                            -- text is the shortest form (rules 1 and 2 of _jcs_number).
                            WHEN e.value::text ~ E'^-?(0|[1-9][0-9]*)(\\.[0-9]*[1-9])?$'
                                AND length(translate(e.value::text, '-.', '')) <= 15
                                AND e.value::text !~ E'^-?0\\.00000' THEN e.value::text
                            ELSE prme._jcs_number(e.value::numeric)
                        END
                        WHEN 'object' THEN prme._jcs(e.value)
                        WHEN 'array' THEN prme._jcs(e.value)
                        ELSE e.value::text
                    END,
                    ',' ORDER BY e.position
                )
                FROM jsonb_array_elements(value) WITH ORDINALITY AS e (value, position)
            ), '') || ']';
        WHEN 'number' THEN
            RETURN prme._jcs_number(value::numeric);
        ELSE
            -- Strings: jsonb's output escapes exactly as RFC 8785 does. true, false, null.
            RETURN value::text;
    END CASE;
END;
$$;

COMMENT ON FUNCTION prme._jcs(jsonb) IS
'Internal: the RFC 8785 canonical text of a JSON value (see prme.canonical_json).';

CREATE FUNCTION prme.canonical_json(value jsonb)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF value IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'value must not be null';
    END IF;
    -- The same bound as a ledger payload's: canonicalising is linear work in PL/pgSQL.
    IF pg_column_size(value) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'value must be at most 1 MiB';
    END IF;
    IF prme._json_too_deep(value) THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'value must nest at most 32 levels deep';
    END IF;
    RETURN prme._jcs(value);
END;
$$;

COMMENT ON FUNCTION prme.canonical_json(jsonb) IS
'The RFC 8785 (JCS) canonical text of a JSON value: keys in UTF-16 order, minimal escapes, numbers as '
'ECMAScript writes doubles. PR422 for a number out of double range or without an exact double form, a value '
'over 1 MiB or one nested deeper than 32 levels.';

CREATE FUNCTION prme.payload_hash(payload jsonb)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF payload IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must not be null';
    END IF;
    IF pg_column_size(payload) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must be at most 1 MiB';
    END IF;
    IF prme._json_too_deep(payload) THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must nest at most 32 levels deep';
    END IF;
    RETURN prme._sha256_hex(prme._jcs(payload));
END;
$$;

COMMENT ON FUNCTION prme.payload_hash(jsonb) IS
'sha256 (lowercase hex) of the RFC 8785 canonical UTF-8 text of payload: the payload_hash that '
'prme.submit_operation expects. PR422 for a payload over 1 MiB, nested deeper than 32 levels, or with a number '
'out of double range or without an exact double form.';

REVOKE ALL ON FUNCTION prme.derived_id(text) FROM public;
GRANT EXECUTE ON FUNCTION prme.derived_id(text) TO prme_app;
REVOKE ALL ON FUNCTION prme.canonical_json(jsonb) FROM public;
GRANT EXECUTE ON FUNCTION prme.canonical_json(jsonb) TO prme_app;
REVOKE ALL ON FUNCTION prme.payload_hash(jsonb) FROM public;
GRANT EXECUTE ON FUNCTION prme.payload_hash(jsonb) TO prme_app;

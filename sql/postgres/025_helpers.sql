-- =============================================================================
-- prme-pg: common helpers
--
-- Internal functions that modules across the schema share, defined before any of
-- them: the append-only trigger, hashing, and the journal's time format. Like
-- every internal helper (names starting with _), none is executable by PUBLIC
-- (010's default privileges) or granted to anyone.
-- =============================================================================

-- The trigger of every append-only table: each table's file attaches it
-- (BEFORE UPDATE OR DELETE per row, BEFORE TRUNCATE per statement).
CREATE FUNCTION prme._refuse_change()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'PR422',
        MESSAGE = format('%s.%s is append-only: %s is not allowed', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_OP);
END;
$$;

COMMENT ON FUNCTION prme._refuse_change() IS
'Internal trigger: refuses UPDATE, DELETE and TRUNCATE on append-only tables.';

CREATE FUNCTION prme._sha256_hex(value text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- convert_to, not ::bytea: the bytea cast would interpret backslash escapes.
    RETURN encode(sha256(convert_to(value, 'UTF8')), 'hex');
END;
$$;

COMMENT ON FUNCTION prme._sha256_hex(text) IS
'Internal: sha256 of the UTF-8 bytes of value, as lowercase hex.';

-- A SQL-standard body, no SET clause: bound to its objects when created and
-- inlined into the statement that calls it (040_nodes.sql, _node_state).
CREATE FUNCTION prme._json_time(value timestamptz)
RETURNS text
LANGUAGE sql
STABLE
PARALLEL SAFE
-- UTC, always six fractional digits: independent of the session's TimeZone and DateStyle.
-- The JSON string's quotes come from the pattern (\" is a literal quote in to_char):
-- every node of this expression is set up again by each transaction that uses it.
RETURN coalesce(to_char(value AT TIME ZONE 'UTC', '\"YYYY-MM-DD"T"HH24:MI:SS.US"Z\"'), 'null');

COMMENT ON FUNCTION prme._json_time(timestamptz) IS
'Internal: a timestamp as a journal JSON value, "YYYY-MM-DDTHH:MM:SS.ffffffZ" in UTC, or null.';

-- uuid v5 (prme.derived_id, 400_jcs.sql) needs SHA-1, which core PostgreSQL lacks
-- (pgcrypto and uuid-ossp have it, but installing an extension needs rights a
-- migration should not assume), so a small PL/pgSQL SHA-1 is here.
CREATE FUNCTION prme._sha1(data bytea)
RETURNS bytea
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_length bigint := octet_length(data);
    v_message bytea;
    v_w bigint[];
    v_h0 bigint := 1732584193;
    v_h1 bigint := 4023233417;
    v_h2 bigint := 2562383102;
    v_h3 bigint := 271733878;
    v_h4 bigint := 3285377520;
    v_a bigint;
    v_b bigint;
    v_c bigint;
    v_d bigint;
    v_e bigint;
    v_f bigint;
    v_k bigint;
    v_t bigint;
    v_offset integer;
BEGIN
    -- FIPS 180-4: pad with 0x80, zeros to 56 mod 64, then the bit length (big-endian).
    v_message := data || E'\\x80'::bytea
        || substr(decode(repeat('00', 64), 'hex'), 1, (119 - (v_length % 64)::integer) % 64)
        || int8send(v_length * 8);
    FOR v_block IN 0 .. octet_length(v_message) / 64 - 1 LOOP
        v_w := '{}';
        FOR v_i IN 0 .. 15 LOOP
            v_offset := v_block * 64 + v_i * 4;
            v_w[v_i] := (get_byte(v_message, v_offset)::bigint << 24)
                | (get_byte(v_message, v_offset + 1)::bigint << 16)
                | (get_byte(v_message, v_offset + 2)::bigint << 8)
                | get_byte(v_message, v_offset + 3)::bigint;
        END LOOP;
        FOR v_i IN 16 .. 79 LOOP
            v_t := v_w[v_i - 3] # v_w[v_i - 8] # v_w[v_i - 14] # v_w[v_i - 16];
            v_w[v_i] := ((v_t << 1) | (v_t >> 31)) & 4294967295;
        END LOOP;
        v_a := v_h0;
        v_b := v_h1;
        v_c := v_h2;
        v_d := v_h3;
        v_e := v_h4;
        FOR v_i IN 0 .. 79 LOOP
            IF v_i < 20 THEN
                v_f := (v_b & v_c) | ((v_b # 4294967295) & v_d);
                v_k := 1518500249;
            ELSIF v_i < 40 THEN
                v_f := v_b # v_c # v_d;
                v_k := 1859775393;
            ELSIF v_i < 60 THEN
                v_f := (v_b & v_c) | (v_b & v_d) | (v_c & v_d);
                v_k := 2400959708;
            ELSE
                v_f := v_b # v_c # v_d;
                v_k := 3395469782;
            END IF;
            v_t := ((((v_a << 5) | (v_a >> 27)) & 4294967295) + v_f + v_e + v_k + v_w[v_i]) & 4294967295;
            v_e := v_d;
            v_d := v_c;
            v_c := ((v_b << 30) | (v_b >> 2)) & 4294967295;
            v_b := v_a;
            v_a := v_t;
        END LOOP;
        v_h0 := (v_h0 + v_a) & 4294967295;
        v_h1 := (v_h1 + v_b) & 4294967295;
        v_h2 := (v_h2 + v_c) & 4294967295;
        v_h3 := (v_h3 + v_d) & 4294967295;
        v_h4 := (v_h4 + v_e) & 4294967295;
    END LOOP;
    RETURN substr(int8send(v_h0), 5) || substr(int8send(v_h1), 5) || substr(int8send(v_h2), 5)
        || substr(int8send(v_h3), 5) || substr(int8send(v_h4), 5);
END;
$$;

COMMENT ON FUNCTION prme._sha1(bytea) IS
'Internal: SHA-1 (FIPS 180-4) of data, 20 bytes. Only for uuid v5 names; never for integrity.';

CREATE FUNCTION prme._uuid_v5(namespace uuid, name text)
RETURNS uuid
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_hash bytea;
BEGIN
    -- RFC 4122 section 4.3: SHA-1 of namespace bytes || UTF-8 name, first 16
    -- bytes, version 5 in the high nibble of byte 6, variant 10 in byte 8.
    v_hash := substr(prme._sha1(uuid_send(namespace) || convert_to(name, 'UTF8')), 1, 16);
    v_hash := set_byte(v_hash, 6, (get_byte(v_hash, 6) & 15) | 80);
    v_hash := set_byte(v_hash, 8, (get_byte(v_hash, 8) & 63) | 128);
    RETURN encode(v_hash, 'hex')::uuid;
END;
$$;

COMMENT ON FUNCTION prme._uuid_v5(uuid, text) IS
'Internal: the RFC 4122 version 5 (SHA-1, name-based) UUID of name in namespace; equals Python uuid.uuid5.';

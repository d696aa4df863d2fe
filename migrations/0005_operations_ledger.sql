-- prme-pg migration 0005_operations_ledger: the operations ledger v2 (receipts, ordered events,
-- dependencies, restartable execution, long memories in parts).

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/400_jcs.sql

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
--     range (including one that would round to zero) is PR422.
-- jsonb cannot hold duplicate keys, NUL characters or lone surrogates, so the
-- input is already I-JSON; the caller's jsonb cast reports those.
--
-- uuid v5 needs SHA-1, which core PostgreSQL lacks (pgcrypto and uuid-ossp have
-- it, but installing an extension needs rights a migration should not assume),
-- so a small PL/pgSQL SHA-1 is here. prme.derived_id(operation_id) is
-- uuid5(473adea8-cd69-5ad2-b4b4-e329cd93d1ff, lowercase text of operation_id);
-- in Python: uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_URL, 'urn:prme-pg:operations'),
-- str(operation_id)).
-- =============================================================================

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
    v_message := data || '\x80'::bytea
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

CREATE FUNCTION prme.derived_id(operation_id uuid)
RETURNS uuid
LANGUAGE plpgsql
IMMUTABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF operation_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'operation_id must not be null';
    END IF;
    RETURN prme._uuid_v5('473adea8-cd69-5ad2-b4b4-e329cd93d1ff', operation_id::text);
END;
$$;

COMMENT ON FUNCTION prme.derived_id(uuid) IS
'The id of the memory (add_node) or event (add_event) that an operation creates: '
'uuid5(uuid5(NAMESPACE_URL, ''urn:prme-pg:operations''), lowercase operation_id), so callers know it in advance.';

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
    v_parts := regexp_match(v_abs::text, '^([0-9]+)(?:\.([0-9]+))?(?:e([-+][0-9]+))?$');
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
            RETURN prme._jcs_double(value::float8);
        EXCEPTION WHEN numeric_value_out_of_range THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422',
                MESSAGE = 'a JSON number is out of the range of an IEEE 754 double',
                DETAIL = format('got %s', btrim(to_char(value, '9.9EEEE')));
        END;
    END IF;
    RETURN prme._jcs_double(value::float8);
END;
$$;

COMMENT ON FUNCTION prme._jcs_number(numeric) IS
'Internal: a JSON number in RFC 8785 form (the ECMAScript text of the nearest double); PR422 when it is out of '
'double range.';

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
        replace(key, U&'\+10FFFF', U&'\+10FFFF\0001'),
        '([\uE000-\uFFFF])', U&'\+10FFFF' || '\1', 'g'
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
                        WHEN 'number' THEN prme._jcs_number(e.value::numeric)
                        WHEN 'object' THEN prme._jcs(e.value)
                        WHEN 'array' THEN prme._jcs(e.value)
                        ELSE e.value::text
                    END,
                    ',' ORDER BY CASE
                        WHEN e.key ~ '[\uE000-\U0010FFFF]' THEN prme._jcs_key_order(e.key) ELSE e.key
                    END COLLATE "C"
                )
                FROM jsonb_each(value) AS e
            ), '') || '}';
        WHEN 'array' THEN
            RETURN '[' || coalesce((
                SELECT string_agg(
                    CASE jsonb_typeof(e.value)
                        WHEN 'number' THEN prme._jcs_number(e.value::numeric)
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
    RETURN prme._jcs(value);
END;
$$;

COMMENT ON FUNCTION prme.canonical_json(jsonb) IS
'The RFC 8785 (JCS) canonical text of a JSON value: keys in UTF-16 order, minimal escapes, numbers as '
'ECMAScript writes doubles. PR422 for a number out of double range.';

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
    RETURN prme._sha256_hex(prme._jcs(payload));
END;
$$;

COMMENT ON FUNCTION prme.payload_hash(jsonb) IS
'sha256 (lowercase hex) of the RFC 8785 canonical UTF-8 text of payload: the payload_hash that '
'prme.submit_operation expects.';

GRANT EXECUTE ON FUNCTION prme.derived_id(uuid) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.canonical_json(jsonb) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.payload_hash(jsonb) TO prme_app;

-- >>> sql/postgres/410_operations.sql

-- =============================================================================
-- prme-pg: the operations ledger (tables)
--
-- An operation is a write that a caller hands over and walks away from: it is
-- accepted durably now (prme.submit_operation) and applied later, exactly once,
-- by the executor (prme.run_operations). Its id is chosen by the caller, so a
-- retry after a lost response finds the same operation instead of making a
-- second one. States:
--
--   accepted -> blocked -> accepted (released) -> processing -> committed
--                                                            \-> rejected
-- committed and rejected are terminal. Every state change appends one row to
-- prme.operation_events in the same transaction, with a per-operation sequence
-- (operation_seq, 1, 2, 3, ...) and a position in the owner's stream (seq), and
-- notifies channel prme_operations (payload 'ready': claimable work; 'events':
-- anything else; submits throttled, see prme._notify_ready below).
--
-- seq is (top-level transaction id << 20) + n, n counting the owner's events
-- within that transaction. Sequences drawn from a SEQUENCE can commit out of
-- order, so a reader resuming "after seq S" could miss an event that commits
-- later with a smaller number. Tying seq to the transaction id closes that gap:
-- prme.operation_events shows only events of transactions older than the
-- reader's snapshot xmin (every one of them has finished), and any transaction
-- that finishes later has a larger id, hence larger seqs. See docs/LEDGER.md.
-- =============================================================================

CREATE TABLE prme.operations (
    user_id text NOT NULL,
    operation_id uuid NOT NULL,
    schema_version integer NOT NULL CHECK (schema_version = 2),
    kind text NOT NULL CHECK (kind ~ '^[a-z][a-z0-9_]{0,62}$'),
    dependencies uuid[] NOT NULL DEFAULT '{}' CHECK (array_position(dependencies, NULL) IS NULL),
    payload_hash text NOT NULL CHECK (payload_hash ~ '^[0-9a-f]{64}$'),
    payload jsonb NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    state text NOT NULL DEFAULT 'accepted'
    CHECK (state IN ('accepted', 'blocked', 'processing', 'committed', 'rejected')),
    blocked_by uuid[] NOT NULL DEFAULT '{}',
    result jsonb,
    error jsonb,
    attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL,
    worker text,
    last_event_seq integer NOT NULL DEFAULT 0 CHECK (last_event_seq >= 0),
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, operation_id),
    CHECK ((state = 'blocked') = (cardinality(blocked_by) > 0)),
    CHECK ((state = 'committed') = (result IS NOT NULL)),
    CHECK (state <> 'rejected' OR error IS NOT NULL)
);

COMMENT ON TABLE prme.operations IS
'The operations ledger: writes accepted by prme.submit_operation and applied exactly once by '
'prme.run_operations. Keyed by the caller''s operation_id within its owner.';
COMMENT ON COLUMN prme.operations.payload_hash IS
'sha256 hex of the RFC 8785 canonical form of payload, recomputed by the database on submit.';
COMMENT ON COLUMN prme.operations.blocked_by IS
'While blocked: the dependencies that have not committed yet, sorted.';
COMMENT ON COLUMN prme.operations.next_attempt_at IS
'The executor claims an accepted or processing operation from this time on (retries back off).';
COMMENT ON COLUMN prme.operations.last_event_seq IS
'operation_seq of the newest event of this operation (events are numbered under the row lock).';

-- The executor's queue: what can be claimed, oldest first.
CREATE INDEX operations_ready ON prme.operations (next_attempt_at)
WHERE state IN ('accepted', 'processing');

-- Dependents to release or reject when an operation finishes.
CREATE INDEX operations_blocked ON prme.operations (user_id)
WHERE state = 'blocked';

CREATE TABLE prme.operation_events (
    user_id text NOT NULL,
    seq bigint NOT NULL CHECK (seq > 0),
    operation_id uuid NOT NULL,
    operation_seq integer NOT NULL CHECK (operation_seq > 0),
    state text NOT NULL CHECK (state IN ('accepted', 'blocked', 'processing', 'committed', 'rejected')),
    detail jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, seq),
    UNIQUE (user_id, operation_id, operation_seq)
    -- No foreign key to prme.operations: events are written only by this module,
    -- under the row lock of their operation, and a key check would lock that row
    -- once more (FOR KEY SHARE, one more WAL record) for every event.
);

COMMENT ON TABLE prme.operation_events IS
'Append-only history of every operation state change. seq orders an owner''s stream (transaction id << 20, '
'plus a counter); operation_seq numbers the events of one operation from 1.';

CREATE TRIGGER operation_events_append_only
BEFORE UPDATE OR DELETE ON prme.operation_events
FOR EACH ROW EXECUTE FUNCTION prme._refuse_change();

CREATE TRIGGER operation_events_no_truncate
BEFORE TRUNCATE ON prme.operation_events
FOR EACH STATEMENT EXECUTE FUNCTION prme._refuse_change();

-- What operation_events returns.
CREATE TYPE prme.operation_event AS (
    seq bigint,
    operation_id uuid,
    operation_seq integer,
    state text,
    detail jsonb,
    created_at timestamptz
);

COMMENT ON TYPE prme.operation_event IS
'One event of an operation as prme.operation_events returns it.';

-- What submit_operation and get_receipt return.
CREATE TYPE prme.operation_receipt AS (
    operation_id uuid,
    kind text,
    payload_hash text,
    dependencies uuid[],  -- noqa: LT01
    state text,
    blocked_by uuid[],  -- noqa: LT01
    result jsonb,
    error jsonb,
    attempts integer,
    created_at timestamptz,
    updated_at timestamptz,
    created boolean
);

COMMENT ON TYPE prme.operation_receipt IS
'The receipt of an operation: its identity, state, what blocks it, its result or error, attempts, and '
'created (true only for the call that accepted it).';

CREATE FUNCTION prme._operation_receipt(op prme.operations, created boolean)
RETURNS prme.operation_receipt
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN ROW(
        op.operation_id, op.kind, op.payload_hash, op.dependencies, op.state, op.blocked_by,
        op.result, op.error, op.attempts, op.created_at, op.updated_at, created
    )::prme.operation_receipt;
END;
$$;

COMMENT ON FUNCTION prme._operation_receipt(prme.operations, boolean) IS
'Internal: the receipt of an operation row.';

CREATE FUNCTION prme._next_event_seq(user_id text)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_xid bigint := pg_current_xact_id()::text::bigint;
    v_base bigint;
    v_last bigint;
BEGIN
    -- 2^43 transactions is decades of continuous work; refuse rather than wrap.
    IF v_xid >= 8796093022208 THEN
        RAISE EXCEPTION 'transaction id % is beyond the range of operation event positions', v_xid;
    END IF;
    v_base := v_xid << 20;
    -- The owner's newest event in this transaction (visible: our own rows).
    SELECT e.seq INTO v_last
    FROM prme.operation_events AS e
    WHERE e.user_id = _next_event_seq.user_id AND e.seq >= v_base AND e.seq < v_base + 1048576
    ORDER BY e.seq DESC
    LIMIT 1;
    IF v_last IS NULL THEN
        RETURN v_base;
    END IF;
    IF v_last + 1 >= v_base + 1048576 THEN
        RAISE EXCEPTION 'more than 1048576 operation events for one owner in one transaction';
    END IF;
    RETURN v_last + 1;
END;
$$;

COMMENT ON FUNCTION prme._next_event_seq(text) IS
'Internal: the next stream position for an event of user_id in this transaction: '
'(top-level transaction id << 20) + n.';

CREATE FUNCTION prme._append_operation_event(op prme.operations, detail jsonb)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The caller has just written op (holding its row lock) with the new state
    -- and last_event_seq already incremented: this event is number last_event_seq.
    INSERT INTO prme.operation_events (user_id, seq, operation_id, operation_seq, state, detail, created_at)
    VALUES (
        op.user_id, prme._next_event_seq(op.user_id), op.operation_id, op.last_event_seq, op.state,
        coalesce(detail, '{}'), op.updated_at
    );
    -- The executor's notifications: identical ones of one transaction are
    -- delivered once, so a batch notifies once or twice, whatever its size.
    PERFORM pg_notify('prme_operations', CASE WHEN op.state = 'accepted' THEN 'ready' ELSE 'events' END);
END;
$$;

COMMENT ON FUNCTION prme._append_operation_event(prme.operations, jsonb) IS
'Internal: appends the event for the state op is now in and notifies channel prme_operations '
'(payload ready for claimable work, events otherwise).';

-- NOTIFY serialises commits: PostgreSQL holds one cluster-wide lock from the
-- moment a notifying transaction starts to commit until its commit record is
-- flushed. One NOTIFY per submit would turn group commit off for every submit;
-- prme.submit_operation therefore notifies at most once per
-- prme.notify_interval_ms (default 50; 0 = every submit). The time of the last
-- notification lives in a sequence: read and written without row locks, outside
-- transactions. Listeners treat a notification as "look now, and once more a
-- moment later" and poll now and then anyway (docs/LEDGER.md).
CREATE SEQUENCE prme.operation_notify_clock AS bigint MINVALUE 0 START WITH 0;

COMMENT ON SEQUENCE prme.operation_notify_clock IS
'Milliseconds since the epoch of the last throttled NOTIFY prme_operations (see prme._notify_ready).';

CREATE FUNCTION prme._notify_ready()
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    v_last bigint;
    v_setting text := current_setting('prme.notify_interval_ms', TRUE);
    v_interval integer := CASE WHEN v_setting ~ '^[0-9]{1,9}$' THEN v_setting::integer ELSE 50 END;
BEGIN
    IF v_interval > 0 THEN
        SELECT c.last_value INTO v_last FROM prme.operation_notify_clock AS c;
        -- A clock that went backwards notifies too, rather than going quiet.
        IF v_now - v_last < v_interval AND v_now >= v_last THEN
            RETURN;
        END IF;
        PERFORM setval('prme.operation_notify_clock', v_now);
    END IF;
    PERFORM pg_notify('prme_operations', 'ready');
END;
$$;

COMMENT ON FUNCTION prme._notify_ready() IS
'Internal: NOTIFY prme_operations, ''ready'' unless one was sent less than prme.notify_interval_ms '
'milliseconds ago (default 50; 0 notifies every time).';

-- Read through the API functions only: no table privileges for prme_app or
-- prme_reader; row-level security (no policy) as on every prme table.
ALTER TABLE prme.operations ENABLE ROW LEVEL SECURITY;
ALTER TABLE prme.operation_events ENABLE ROW LEVEL SECURITY;

-- >>> sql/postgres/420_submit_operation.sql

-- =============================================================================
-- prme-pg: submit_operation and get_receipt
--
-- submit_operation durably accepts a write for later execution. The operation
-- id is the caller's, stable across retries, and scoped by owner:
--   new id                         -> accepted, receipt with created = true
--   same id, same operation        -> the stored receipt as it stands now (created = false)
--   same id, anything else differs -> PR409; the stored operation is untouched
-- "Same operation" means the same kind, schema_version, dependencies (as a sorted
-- set) and payload_hash. The payload_hash is checked against the payload: the
-- database recomputes the sha256 of its RFC 8785 form and refuses a mismatch
-- (PR422), so a stored hash always describes the stored payload.
-- Dependencies must be operations the same owner has already submitted, so
-- there are no cycles and nothing waits for an operation that will never come.
-- A new operation appends its "accepted" event (operation_seq 1) and wakes
-- listeners with NOTIFY prme_operations, 'ready', throttled to one per
-- prme.notify_interval_ms (see prme._notify_ready in 410_operations.sql).
-- =============================================================================

CREATE FUNCTION prme._resubmitted(
    op prme.operations,
    kind text,
    dependencies uuid[],
    payload_hash text
)
RETURNS prme.operation_receipt
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_differs text[] := '{}'::text[];
BEGIN
    IF op.kind <> kind THEN
        v_differs := v_differs || 'kind'::text;
    END IF;
    IF op.dependencies <> dependencies THEN
        v_differs := v_differs || 'dependencies'::text;
    END IF;
    IF op.payload_hash <> payload_hash THEN
        v_differs := v_differs || 'payload_hash'::text;
    END IF;
    IF cardinality(v_differs) > 0 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR409',
            MESSAGE = 'operation_id was already used for another operation',
            DETAIL = format('the stored operation differs in %s', array_to_string(v_differs, ', ')),
            HINT = 'choose a new operation_id for a new operation';
    END IF;
    RETURN prme._operation_receipt(op, FALSE);
END;
$$;

COMMENT ON FUNCTION prme._resubmitted(prme.operations, text, uuid[], text) IS
'Internal: the answer to a submit whose operation_id is taken: the stored receipt when it is the same '
'operation, else PR409.';

CREATE FUNCTION prme.submit_operation(
    user_id text,
    operation_id uuid,
    schema_version integer,
    kind text,
    dependencies uuid[],
    payload_hash text,
    payload jsonb
)
RETURNS prme.operation_receipt
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(submit_operation.user_id);
    v_op prme.operations;
    v_dependencies uuid[];
    v_hash text;
    v_missing uuid[];
    v_now timestamptz := now();
BEGIN
    IF submit_operation.operation_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'operation_id must not be null';
    END IF;
    IF submit_operation.schema_version IS DISTINCT FROM 2 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'schema_version must be 2',
            DETAIL = format('got %s', coalesce(submit_operation.schema_version::text, 'NULL'));
    END IF;
    IF submit_operation.kind IS NULL
       OR submit_operation.kind NOT IN ('add_node', 'add_event', 'reinforce', 'archive_node') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'kind must be add_node, add_event, reinforce or archive_node',
            DETAIL = format('got %s', coalesce(quote_literal(left(submit_operation.kind, 80)), 'NULL'));
    END IF;
    IF submit_operation.payload IS NULL OR jsonb_typeof(submit_operation.payload) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must be a JSON object';
    END IF;
    IF pg_column_size(submit_operation.payload) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must be at most 1 MiB';
    END IF;
    IF array_position(submit_operation.dependencies, NULL) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'dependencies must not contain null';
    END IF;
    -- A set: sorted, duplicates dropped.
    IF cardinality(submit_operation.dependencies) > 0 THEN
        v_dependencies := ARRAY(SELECT DISTINCT d FROM unnest(submit_operation.dependencies) AS d ORDER BY d);
        IF cardinality(v_dependencies) > 100 THEN
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'an operation may have at most 100 dependencies';
        END IF;
        IF submit_operation.operation_id = ANY(v_dependencies) THEN
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'an operation cannot depend on itself';
        END IF;
    ELSE
        v_dependencies := '{}';
    END IF;
    v_hash := encode(sha256(convert_to(prme._jcs(submit_operation.payload), 'UTF8')), 'hex');
    IF v_hash IS DISTINCT FROM submit_operation.payload_hash THEN
        IF submit_operation.payload_hash IS NULL OR submit_operation.payload_hash !~ '^[0-9a-f]{64}$' THEN
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload_hash must be 64 lowercase hex digits';
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'payload_hash does not match the payload',
            DETAIL = format('sha256 of the payload''s RFC 8785 form is %s', v_hash);
    END IF;

    -- Insert first: a retry meets its operation in the primary key and writes nothing
    -- (and a concurrent first submit of the same id is waited for, then found).
    INSERT INTO prme.operations (
        user_id, operation_id, schema_version, kind, dependencies, payload_hash, payload, state, blocked_by,
        attempts, next_attempt_at, last_event_seq, created_at, updated_at
    ) VALUES (
        v_user_id, submit_operation.operation_id, 2, submit_operation.kind, v_dependencies, v_hash,
        submit_operation.payload, 'accepted', '{}', 0, v_now, 1, v_now, v_now
    )
    ON CONFLICT DO NOTHING
    RETURNING * INTO v_op;
    IF NOT FOUND THEN
        SELECT o.* INTO v_op
        FROM prme.operations AS o
        WHERE o.user_id = v_user_id AND o.operation_id = submit_operation.operation_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING
                ERRCODE = 'serialization_failure',
                MESSAGE = 'a concurrent submit of this operation_id is not visible to this transaction; retry';
        END IF;
        RETURN prme._resubmitted(v_op, submit_operation.kind, v_dependencies, v_hash);
    END IF;

    IF cardinality(v_dependencies) > 0 THEN
        v_missing := ARRAY(
            SELECT d FROM unnest(v_dependencies) AS d
            WHERE NOT EXISTS (
                SELECT FROM prme.operations AS o WHERE o.user_id = v_user_id AND o.operation_id = d
            )
            ORDER BY d
        );
        IF cardinality(v_missing) > 0 THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422',
                MESSAGE = 'dependencies must be operations this owner has already submitted',
                DETAIL = format('unknown: %s', array_to_string(v_missing, ', '));
        END IF;
    END IF;

    INSERT INTO prme.operation_events (user_id, seq, operation_id, operation_seq, state, detail, created_at)
    VALUES (v_user_id, prme._next_event_seq(v_user_id), v_op.operation_id, 1, 'accepted', '{}', v_now);
    PERFORM prme._notify_ready();
    RETURN prme._operation_receipt(v_op, TRUE);
END;
$$;

COMMENT ON FUNCTION prme.submit_operation(text, uuid, integer, text, uuid[], text, jsonb) IS
'Durably accepts an operation of user_id for the executor. A new operation_id returns the receipt with '
'created = true; the same id with the same kind, dependencies and payload_hash returns the stored receipt '
'(created = false); the same id with anything else raises PR409. schema_version must be 2; kind is add_node, '
'add_event, reinforce or archive_node; payload_hash must be the sha256 hex of the payload''s RFC 8785 form '
'(PR422 otherwise); dependencies must already be submitted by the same owner.';

CREATE FUNCTION prme.get_receipt(user_id text, operation_id uuid)
RETURNS prme.operation_receipt
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(get_receipt.user_id);
    v_op prme.operations;
BEGIN
    SELECT o.* INTO v_op
    FROM prme.operations AS o
    WHERE o.user_id = v_user_id AND o.operation_id = get_receipt.operation_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'operation not found';
    END IF;
    RETURN prme._operation_receipt(v_op, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.get_receipt(text, uuid) IS
'The receipt of an operation of user_id as it stands now. PR404 when the id is unknown to this owner.';

GRANT EXECUTE ON FUNCTION prme.submit_operation(text, uuid, integer, text, uuid[], text, jsonb) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.get_receipt(text, uuid) TO prme_app;

-- >>> sql/postgres/430_operation_events.sql

-- =============================================================================
-- prme-pg: operation_events (resumable reads of the event stream)
--
-- A reader keeps the last seq it has seen and asks for what comes after it. It
-- sees only events of transactions older than its snapshot's xmin: all of those
-- have finished, and every transaction still running or yet to start has a
-- larger transaction id, so its events get larger seqs. Paging by after_seq
-- therefore never skips an event that commits late, and never repeats one. The
-- price: an event stays invisible until every transaction (of any database of
-- the cluster) that was already running when it committed has finished, so a
-- long-running writer delays the stream, never reorders it. Readers that wake
-- on NOTIFY prme_operations should also poll now and then (docs/LEDGER.md).
-- =============================================================================

CREATE FUNCTION prme.operation_events(
    user_id text,
    after_seq bigint DEFAULT 0,
    operation_id uuid DEFAULT NULL,
    max_count integer DEFAULT 100
)
RETURNS SETOF prme.operation_event
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(operation_events.user_id);
    v_horizon bigint;
BEGIN
    IF operation_events.max_count IS NULL OR operation_events.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    IF operation_events.after_seq IS NULL OR operation_events.after_seq < 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'after_seq must be a non-negative integer';
    END IF;
    IF operation_events.operation_id IS NOT NULL THEN
        PERFORM FROM prme.operations AS o
        WHERE o.user_id = v_user_id AND o.operation_id = operation_events.operation_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'operation not found';
        END IF;
    END IF;
    -- A STABLE function reads with its caller's snapshot: the xmin below and the
    -- rows read belong to the same snapshot.
    v_horizon := pg_snapshot_xmin(pg_current_snapshot())::text::bigint << 20;

    IF operation_events.operation_id IS NULL THEN
        RETURN QUERY
        SELECT e.seq, e.operation_id, e.operation_seq, e.state, e.detail, e.created_at
        FROM prme.operation_events AS e
        WHERE e.user_id = v_user_id AND e.seq > operation_events.after_seq AND e.seq < v_horizon
        ORDER BY e.seq
        LIMIT operation_events.max_count;
    ELSE
        RETURN QUERY
        SELECT e.seq, e.operation_id, e.operation_seq, e.state, e.detail, e.created_at
        FROM prme.operation_events AS e
        WHERE e.user_id = v_user_id AND e.operation_id = operation_events.operation_id
          AND e.seq > operation_events.after_seq AND e.seq < v_horizon
        ORDER BY e.seq
        LIMIT operation_events.max_count;
    END IF;
END;
$$;

COMMENT ON FUNCTION prme.operation_events(text, bigint, uuid, integer) IS
'Events of user_id''s operations (or of one operation) with seq > after_seq, in seq order, at most max_count. '
'Pass the last seq seen to resume: no event is skipped or repeated, even one whose transaction commits late, '
'because only events of transactions older than every running one are shown. PR404 for an unknown operation_id.';

GRANT EXECUTE ON FUNCTION prme.operation_events(text, bigint, uuid, integer) TO prme_app;

-- >>> sql/postgres/440_run_operations.sql

-- =============================================================================
-- prme-pg: run_operations (the executor)
--
-- One call is one transaction: it claims up to max_count claimable operations
-- (FOR UPDATE SKIP LOCKED, so executors run side by side without waiting for
-- each other) and applies each through the public API functions, in the same
-- transaction that marks it committed. An operation therefore takes effect
-- exactly once: if the call dies, neither the effect nor the mark survives.
-- Each operation runs in its own subtransaction, so one failure does not undo
-- the rest of the batch:
--   invalid payload (PR422, data errors)  -> rejected, reason invalid_payload
--   PR404                                 -> rejected, reason not_found
--   PR409                                 -> rejected, reason conflict
--   lock contention (40001, 40P01, 55P03) -> left as it was, claimed again later
--   anything else                         -> retried with backoff (1 s, 2 s, 4 s, ...),
--                                            rejected as attempts_exhausted on attempt 5
-- Dependencies: an operation whose dependencies have not all committed becomes
-- blocked (blocked_by sorted); the commit of its last open dependency releases
-- it, and the rejection of any dependency rejects it (dependency_rejected),
-- transitively. The dependency check locks the open dependencies FOR SHARE
-- NOWAIT, so no dependency can commit unseen between the check and the commit
-- of "blocked": nothing stays blocked forever. An operation whose dependency
-- finished in a transaction younger than this call's is left for the next call,
-- so that in the event stream (ordered by transaction id) a dependency's outcome
-- always comes before anything that waited for it.
-- Ids: add_node and add_event create prme.derived_id(operation_id); reinforce
-- passes operation_id as its request_id.
-- =============================================================================

CREATE FUNCTION prme._payload_fields(payload jsonb, kind text, allowed text[], required text[])
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_unknown text[];
    v_missing text[];
BEGIN
    v_unknown := ARRAY(SELECT k FROM jsonb_object_keys(payload) AS k WHERE k <> ALL(allowed) ORDER BY k);
    IF cardinality(v_unknown) > 0 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('unknown payload field for %s: %s', kind, array_to_string(v_unknown, ', ')),
            DETAIL = format('allowed: %s', array_to_string(allowed, ', '));
    END IF;
    v_missing := ARRAY(
        SELECT k FROM unnest(required) AS k
        WHERE coalesce(jsonb_typeof(payload -> k), 'null') = 'null'
        ORDER BY k
    );
    IF cardinality(v_missing) > 0 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('missing payload field for %s: %s', kind, array_to_string(v_missing, ', '));
    END IF;
END;
$$;

COMMENT ON FUNCTION prme._payload_fields(jsonb, text, text[], text[]) IS
'Internal: PR422 unless payload has only allowed fields and every required one (not null).';

CREATE FUNCTION prme._payload_text(payload jsonb, field text)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(jsonb_typeof(payload -> field), 'null') NOT IN ('string', 'null') THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = format('payload field %s must be a string', field);
    END IF;
    RETURN payload ->> field;
END;
$$;

COMMENT ON FUNCTION prme._payload_text(jsonb, text) IS
'Internal: a string field of a payload (NULL when absent or null); PR422 for any other JSON type.';

CREATE FUNCTION prme._payload_number(payload jsonb, field text)
RETURNS numeric
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(jsonb_typeof(payload -> field), 'null') NOT IN ('number', 'null') THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = format('payload field %s must be a number', field);
    END IF;
    RETURN (payload -> field)::numeric;
END;
$$;

COMMENT ON FUNCTION prme._payload_number(jsonb, text) IS
'Internal: a number field of a payload as an exact numeric (NULL when absent or null); PR422 otherwise.';

CREATE FUNCTION prme._payload_uuid(payload jsonb, field text)
RETURNS uuid
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text text := prme._payload_text(payload, field);
BEGIN
    IF v_text IS NOT NULL
       AND v_text !~ '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('payload field %s must be a UUID (8-4-4-4-12 hex digits)', field);
    END IF;
    RETURN v_text::uuid;
END;
$$;

COMMENT ON FUNCTION prme._payload_uuid(jsonb, text) IS
'Internal: a UUID field of a payload (NULL when absent or null); PR422 unless it is 8-4-4-4-12 hex digits.';

CREATE FUNCTION prme._payload_time(payload jsonb, field text)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_text text := prme._payload_text(payload, field);
BEGIN
    -- An explicit offset is required: the session's TimeZone must not change the meaning.
    IF v_text IS NOT NULL AND v_text !~ (
        '^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?'
        || '(Z|z|[+-][0-9]{2}(:?[0-9]{2})?)$'
    ) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = format('payload field %s must be an ISO 8601 time with a UTC offset', field);
    END IF;
    RETURN v_text::timestamptz;
END;
$$;

COMMENT ON FUNCTION prme._payload_time(jsonb, text) IS
'Internal: an ISO 8601 time field (with Z or an offset) of a payload; NULL when absent; PR422 otherwise.';

CREATE FUNCTION prme._apply_operation(
    op prme.operations,
    parts_budget integer,
    OUT result jsonb,
    OUT parts_used integer,
    OUT progress jsonb
)
RETURNS record
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_payload jsonb := op.payload;
    v_content text;
    v_budget integer;
    v_number numeric;
    v_step record;
    v_node prme.node_view;
    v_event prme.events;
BEGIN
    parts_used := 0;
    CASE op.kind
        WHEN 'add_node' THEN
            PERFORM prme._payload_fields(v_payload, op.kind, ARRAY[
                'content', 'scope', 'namespace', 'kind', 'confidence_base', 'salience_base', 'stability',
                'decay_profile', 'next_review_at', 'token_budget'
            ], ARRAY['content']);
            -- Validate up front what would otherwise fail only after a long memory's parts.
            v_content := prme._valid_content(prme._payload_text(v_payload, 'content'));
            PERFORM prme._valid_name('scope', coalesce(prme._payload_text(v_payload, 'scope'), 'personal'));
            PERFORM prme._valid_name('namespace', coalesce(prme._payload_text(v_payload, 'namespace'), 'default'));
            PERFORM prme._valid_name('kind', coalesce(prme._payload_text(v_payload, 'kind'), 'fact'));
            v_number := coalesce(prme._payload_number(v_payload, 'token_budget'), 512);
            IF v_number <> trunc(v_number) OR v_number NOT BETWEEN 1 AND 65536 THEN
                RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'token_budget must be an integer from 1 to 65536';
            END IF;
            v_budget := v_number;
            -- A memory longer than the token budget is planned into parts first
            -- (450_long_memories.sql); a token has at least one character, so
            -- shorter text needs no count.
            IF length(v_content) > v_budget AND prme._word_count(v_content) > v_budget THEN
                v_step := prme._long_memory_step(op, v_content, v_budget, parts_budget);
                parts_used := v_step.parts_validated;
                progress := jsonb_build_object('parts', v_step.parts, 'parts_validated', v_step.parts_done);
                IF NOT v_step.complete THEN
                    RETURN;  -- result stays NULL: more parts to go
                END IF;
                v_content := v_step.content_out;
            END IF;
            v_node := prme.add_node(
                user_id => op.user_id,
                content => v_content,
                scope => coalesce(prme._payload_text(v_payload, 'scope'), 'personal'),
                namespace => coalesce(prme._payload_text(v_payload, 'namespace'), 'default'),
                kind => coalesce(prme._payload_text(v_payload, 'kind'), 'fact'),
                confidence_base => coalesce(prme._payload_number(v_payload, 'confidence_base'), 0.5),
                salience_base => coalesce(prme._payload_number(v_payload, 'salience_base'), 0.5),
                stability => coalesce(prme._payload_text(v_payload, 'stability'), 'low'),
                decay_profile => coalesce(prme._payload_text(v_payload, 'decay_profile'), 'medium'),
                next_review_at => prme._payload_time(v_payload, 'next_review_at'),
                node_id => prme.derived_id(op.operation_id)
            );
            result := jsonb_build_object('node_id', v_node.id, 'node_version', v_node.version);
            IF progress IS NOT NULL THEN
                result := result || jsonb_build_object('parts', progress -> 'parts');
            END IF;
        WHEN 'add_event' THEN
            PERFORM prme._payload_fields(v_payload, op.kind, ARRAY[
                'content', 'scope', 'namespace', 'kind', 'payload', 'occurred_at'
            ], ARRAY['content']);
            v_event := prme.add_event(
                user_id => op.user_id,
                content => prme._payload_text(v_payload, 'content'),
                scope => coalesce(prme._payload_text(v_payload, 'scope'), 'personal'),
                namespace => coalesce(prme._payload_text(v_payload, 'namespace'), 'default'),
                kind => coalesce(prme._payload_text(v_payload, 'kind'), 'message'),
                payload => coalesce(v_payload -> 'payload', '{}'),
                occurred_at => prme._payload_time(v_payload, 'occurred_at'),
                event_id => prme.derived_id(op.operation_id)
            );
            result := jsonb_build_object('event_id', v_event.id);
        WHEN 'reinforce' THEN
            PERFORM prme._payload_fields(v_payload, op.kind, ARRAY['node_id', 'evidence_id'], ARRAY['node_id']);
            v_node := prme.reinforce(
                node_id => prme._payload_uuid(v_payload, 'node_id'),
                user_id => op.user_id,
                evidence_id => prme._payload_uuid(v_payload, 'evidence_id'),
                request_id => op.operation_id
            );
            result := jsonb_build_object('node_id', v_node.id, 'node_version', v_node.version, 'replayed', v_node.replayed);
        WHEN 'archive_node' THEN
            PERFORM prme._payload_fields(v_payload, op.kind, ARRAY['node_id'], ARRAY['node_id']);
            v_node := prme.archive_node(op.user_id, prme._payload_uuid(v_payload, 'node_id'));
            result := jsonb_build_object('node_id', v_node.id, 'node_version', v_node.version);
        ELSE
            RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = format('unknown operation kind %s', op.kind);
    END CASE;
END;
$$;

COMMENT ON FUNCTION prme._apply_operation(prme.operations, integer) IS
'Internal: applies one operation through the API functions and returns its result, or NULL while a long '
'memory still has parts to validate (parts_used: validated by this call; progress: parts and parts_validated).';

CREATE FUNCTION prme._release_dependents(op prme.operations)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_dependent prme.operations;
BEGIN
    -- Usually nothing waits: a plain look is cheaper than opening the locking loop.
    PERFORM FROM prme.operations AS o
    WHERE o.user_id = op.user_id AND o.state = 'blocked' AND op.operation_id = ANY(o.blocked_by);
    IF NOT FOUND THEN
        RETURN;
    END IF;
    FOR v_dependent IN
        SELECT o.* FROM prme.operations AS o
        WHERE o.user_id = op.user_id AND o.state = 'blocked' AND op.operation_id = ANY(o.blocked_by)
        ORDER BY o.operation_id
        FOR UPDATE
    LOOP
        v_dependent.blocked_by := array_remove(v_dependent.blocked_by, op.operation_id);
        IF cardinality(v_dependent.blocked_by) > 0 THEN
            UPDATE prme.operations AS o SET blocked_by = v_dependent.blocked_by
            WHERE o.user_id = v_dependent.user_id AND o.operation_id = v_dependent.operation_id;
        ELSE
            UPDATE prme.operations AS o SET
                state = 'accepted',
                blocked_by = '{}',
                next_attempt_at = now(),
                last_event_seq = o.last_event_seq + 1,
                updated_at = now()
            WHERE o.user_id = v_dependent.user_id AND o.operation_id = v_dependent.operation_id
            RETURNING o.* INTO v_dependent;
            PERFORM prme._append_operation_event(
                v_dependent, jsonb_build_object('released_by', op.operation_id)
            );
        END IF;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION prme._release_dependents(prme.operations) IS
'Internal: after op committed, drops it from the blocked_by of its blocked dependents and releases '
'(state accepted) those with nothing left to wait for.';

CREATE FUNCTION prme._reject_operation(op prme.operations, error jsonb)
RETURNS prme.operations
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_rejected prme.operations;
    v_dependent prme.operations;
    v_frontier uuid[];
    v_next uuid[];
    v_cause uuid;
BEGIN
    UPDATE prme.operations AS o SET
        state = 'rejected',
        blocked_by = '{}',
        error = _reject_operation.error,
        result = NULL,
        attempts = op.attempts,
        worker = op.worker,
        last_event_seq = o.last_event_seq + 1,
        updated_at = now()
    WHERE o.user_id = op.user_id AND o.operation_id = op.operation_id
    RETURNING o.* INTO v_rejected;
    PERFORM prme._append_operation_event(v_rejected, jsonb_build_object('error', _reject_operation.error));

    -- Whatever waits for a rejected operation can never run: reject it too, transitively.
    v_frontier := ARRAY[op.operation_id];
    WHILE cardinality(v_frontier) > 0 LOOP
        v_next := '{}';
        FOR v_dependent IN
            SELECT o.* FROM prme.operations AS o
            WHERE o.user_id = op.user_id AND o.state = 'blocked' AND o.blocked_by && v_frontier
            ORDER BY o.operation_id
            FOR UPDATE
        LOOP
            v_cause := (SELECT d FROM unnest(v_dependent.blocked_by) AS d WHERE d = ANY(v_frontier) ORDER BY d LIMIT 1);
            UPDATE prme.operations AS o SET
                state = 'rejected',
                blocked_by = '{}',
                error = jsonb_build_object(
                    'reason', 'dependency_rejected',
                    'dependency', v_cause,
                    'message', format('dependency %s was rejected', v_cause)
                ),
                last_event_seq = o.last_event_seq + 1,
                updated_at = now()
            WHERE o.user_id = v_dependent.user_id AND o.operation_id = v_dependent.operation_id
            RETURNING o.* INTO v_dependent;
            PERFORM prme._append_operation_event(v_dependent, jsonb_build_object('error', v_dependent.error));
            v_next := v_next || v_dependent.operation_id;
        END LOOP;
        v_frontier := v_next;
    END LOOP;
    RETURN v_rejected;
END;
$$;

COMMENT ON FUNCTION prme._reject_operation(prme.operations, jsonb) IS
'Internal: marks op rejected with error (a JSON object with reason and message) and rejects every blocked '
'operation that depends on it, directly or not, with reason dependency_rejected.';

CREATE FUNCTION prme._execute_operation(
    user_id text,
    operation_id uuid,
    worker text,
    parts_budget integer,
    OUT outcome text,
    OUT parts_used integer
)
RETURNS record
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_op prme.operations;
    v_rejected uuid[];
    v_open uuid[];
    v_applied record;
BEGIN
    parts_used := 0;
    -- The claim holds the row lock; read the row as it is now.
    SELECT o.* INTO v_op
    FROM prme.operations AS o
    WHERE o.user_id = _execute_operation.user_id AND o.operation_id = _execute_operation.operation_id;
    IF NOT FOUND OR v_op.state NOT IN ('accepted', 'processing') THEN
        outcome := 'skipped';
        RETURN;
    END IF;

    IF v_op.state = 'accepted' AND cardinality(v_op.dependencies) > 0 THEN
        SELECT
            coalesce(array_agg(d.operation_id ORDER BY d.operation_id) FILTER (WHERE d.state = 'rejected'), '{}'),
            coalesce(array_agg(d.operation_id ORDER BY d.operation_id) FILTER (
                WHERE d.state NOT IN ('committed', 'rejected')), '{}')
        INTO v_rejected, v_open
        FROM prme.operations AS d
        WHERE d.user_id = v_op.user_id AND d.operation_id = ANY(v_op.dependencies);
        IF cardinality(v_open) > 0 AND cardinality(v_rejected) = 0 THEN
            -- Hold the open dependencies still until this transaction ends, so none
            -- of them can commit between this look and the commit of "blocked"
            -- (its commit would look for blocked dependents before ours is visible).
            -- NOWAIT: one that is being executed right now raises 55P03, and this
            -- operation is simply tried again in a later call.
            SELECT
                coalesce(array_agg(d.operation_id ORDER BY d.operation_id) FILTER (WHERE d.state = 'rejected'), '{}'),
                coalesce(array_agg(d.operation_id ORDER BY d.operation_id) FILTER (
                    WHERE d.state NOT IN ('committed', 'rejected')), '{}')
            INTO v_rejected, v_open
            FROM (
                SELECT o.operation_id, o.state FROM prme.operations AS o
                WHERE o.user_id = v_op.user_id AND o.operation_id = ANY(v_open)
                ORDER BY o.operation_id
                FOR SHARE NOWAIT
            ) AS d;
        END IF;
        -- Causality in the stream: seq follows the transaction id, so a dependency
        -- that finished in a transaction younger than this one would show its
        -- outcome after this operation's. Leave the operation to a later call
        -- (a new transaction, hence a larger id).
        PERFORM FROM prme.operation_events AS e
        WHERE e.user_id = v_op.user_id AND e.operation_id = ANY(v_op.dependencies)
          AND e.seq >= (pg_current_xact_id()::text::bigint + 1) << 20;
        IF FOUND THEN
            outcome := 'skipped';
            RETURN;
        END IF;
        IF cardinality(v_rejected) > 0 THEN
            v_op.worker := _execute_operation.worker;
            PERFORM prme._reject_operation(v_op, jsonb_build_object(
                'reason', 'dependency_rejected',
                'dependency', v_rejected[1],
                'message', format('dependency %s was rejected', v_rejected[1])
            ));
            outcome := 'rejected';
            RETURN;
        END IF;
        IF cardinality(v_open) > 0 THEN
            UPDATE prme.operations AS o SET
                state = 'blocked',
                blocked_by = v_open,
                last_event_seq = o.last_event_seq + 1,
                updated_at = now()
            WHERE o.user_id = v_op.user_id AND o.operation_id = v_op.operation_id
            RETURNING o.* INTO v_op;
            PERFORM prme._append_operation_event(v_op, jsonb_build_object('blocked_by', v_open));
            outcome := 'blocked';
            RETURN;
        END IF;
    END IF;

    IF v_op.state = 'accepted' THEN
        v_op.state := 'processing';
        v_op.attempts := v_op.attempts + 1;
        v_op.worker := _execute_operation.worker;
        v_op.last_event_seq := v_op.last_event_seq + 1;
        v_op.updated_at := now();
        -- The event now; the row is written once, below, together with the outcome.
        PERFORM prme._append_operation_event(v_op, jsonb_build_object(
            'attempt', v_op.attempts, 'worker', v_op.worker
        ));
    END IF;

    v_applied := prme._apply_operation(v_op, parts_budget);
    parts_used := v_applied.parts_used;
    IF v_applied.result IS NULL THEN
        -- A long memory with parts still to validate: keep it processing, report progress.
        v_op.last_event_seq := v_op.last_event_seq + 1;
        UPDATE prme.operations AS o SET
            state = v_op.state,
            attempts = v_op.attempts,
            worker = v_op.worker,
            last_event_seq = v_op.last_event_seq,
            updated_at = v_op.updated_at
        WHERE o.user_id = v_op.user_id AND o.operation_id = v_op.operation_id;
        PERFORM prme._append_operation_event(v_op, v_applied.progress);
        outcome := 'progress';
        RETURN;
    END IF;

    v_op.state := 'committed';
    v_op.result := v_applied.result;
    v_op.error := NULL;
    v_op.last_event_seq := v_op.last_event_seq + 1;
    v_op.updated_at := now();
    UPDATE prme.operations AS o SET
        state = v_op.state,
        result = v_op.result,
        error = NULL,
        attempts = v_op.attempts,
        worker = v_op.worker,
        last_event_seq = v_op.last_event_seq,
        updated_at = v_op.updated_at
    WHERE o.user_id = v_op.user_id AND o.operation_id = v_op.operation_id;
    PERFORM prme._append_operation_event(v_op, jsonb_build_object('result', v_op.result));
    PERFORM prme._release_dependents(v_op);
    outcome := 'committed';
END;
$$;

COMMENT ON FUNCTION prme._execute_operation(text, uuid, text, integer) IS
'Internal: one step of one claimed operation: check its dependencies (block, reject or go on), apply it, '
'and record the outcome (committed, blocked, rejected, progress or skipped).';

CREATE FUNCTION prme._operation_failed(
    user_id text,
    operation_id uuid,
    worker text,
    sqlstate text,
    message text,
    detail text
)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_op prme.operations;
    v_reason text;
    v_error jsonb;
    v_attempt integer;
BEGIN
    -- Lock contention says nothing about the operation: leave it for a later call.
    IF _operation_failed.sqlstate IN ('40001', '40P01', '55P03') THEN
        RETURN 'skipped';
    END IF;
    SELECT o.* INTO v_op
    FROM prme.operations AS o
    WHERE o.user_id = _operation_failed.user_id AND o.operation_id = _operation_failed.operation_id
    FOR UPDATE;
    IF NOT FOUND OR v_op.state NOT IN ('accepted', 'processing') THEN
        RETURN 'skipped';
    END IF;

    v_reason := CASE
        WHEN _operation_failed.sqlstate = 'PR422' OR left(_operation_failed.sqlstate, 2) = '22' THEN 'invalid_payload'
        WHEN _operation_failed.sqlstate = 'PR404' THEN 'not_found'
        WHEN _operation_failed.sqlstate IN ('PR409', '23505') THEN 'conflict'
        WHEN left(_operation_failed.sqlstate, 2) = '23' THEN 'invalid_payload'
    END;
    v_error := jsonb_build_object(
        'reason', coalesce(v_reason, 'transient'),
        'sqlstate', _operation_failed.sqlstate,
        'message', _operation_failed.message
    );
    IF _operation_failed.detail IS NOT NULL AND _operation_failed.detail <> '' THEN
        v_error := v_error || jsonb_build_object('detail', _operation_failed.detail);
    END IF;
    -- The failed try was rolled back, its attempt count with it: count it here.
    -- (A long memory that was already processing counted its attempt earlier.)
    v_attempt := v_op.attempts + CASE WHEN v_op.state = 'accepted' THEN 1 ELSE 0 END;
    v_op.attempts := v_attempt;
    v_op.worker := _operation_failed.worker;

    IF v_reason IS NOT NULL THEN
        PERFORM prme._reject_operation(v_op, v_error);
        RETURN 'rejected';
    END IF;
    IF v_attempt >= 5 THEN
        PERFORM prme._reject_operation(v_op, jsonb_build_object(
            'reason', 'attempts_exhausted',
            'message', format('gave up after %s attempts', v_attempt),
            'last_error', v_error
        ));
        RETURN 'rejected';
    END IF;

    UPDATE prme.operations AS o SET
        state = 'accepted',
        attempts = v_attempt,
        error = v_error,
        worker = v_op.worker,
        next_attempt_at = now() + least(2 ^ (v_attempt - 1), 60) * interval '1 second',
        last_event_seq = o.last_event_seq + 1,
        updated_at = now()
    WHERE o.user_id = v_op.user_id AND o.operation_id = v_op.operation_id
    RETURNING o.* INTO v_op;
    PERFORM prme._append_operation_event(v_op, jsonb_build_object(
        'retry', TRUE,
        'attempt', v_attempt,
        'retry_at', prme._json_time(v_op.next_attempt_at)::jsonb,
        'error', v_error
    ));
    RETURN 'retry';
END;
$$;

COMMENT ON FUNCTION prme._operation_failed(text, uuid, text, text, text, text) IS
'Internal: records a failed try of an operation: rejected for invalid input, not found or conflict; back to '
'accepted with backoff for a transient error (rejected as attempts_exhausted on attempt 5); untouched for '
'lock contention. Returns the outcome.';

CREATE FUNCTION prme.run_operations(
    max_count integer DEFAULT 10,
    worker text DEFAULT 'sql',
    max_parts integer DEFAULT 64
)
RETURNS TABLE (
    user_id text,
    operation_id uuid,
    kind text,
    state text,
    outcome text,
    attempts integer
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_users text[];
    v_ids uuid[];
    v_claimed record;
    v_parts_left integer;
    v_step record;
    v_sqlstate text;
    v_message text;
    v_detail text;
BEGIN
    IF run_operations.max_count IS NULL OR run_operations.max_count NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 1000';
    END IF;
    IF run_operations.worker IS NULL OR length(run_operations.worker) NOT BETWEEN 1 AND 200
       OR run_operations.worker ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'worker must be 1 to 200 characters, no control characters';
    END IF;
    IF run_operations.max_parts IS NULL OR run_operations.max_parts NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_parts must be between 1 and 100000';
    END IF;
    v_parts_left := run_operations.max_parts;

    -- Claim: oldest first, skipping rows another executor holds.
    v_users := '{}';
    v_ids := '{}';
    FOR v_claimed IN
        SELECT q.user_id, q.operation_id
        FROM prme.operations AS q
        WHERE q.state IN ('accepted', 'processing') AND q.next_attempt_at <= now()
        ORDER BY q.next_attempt_at
        LIMIT run_operations.max_count
        FOR UPDATE SKIP LOCKED
    LOOP
        v_users := v_users || v_claimed.user_id;
        v_ids := v_ids || v_claimed.operation_id;
    END LOOP;

    FOR v_i IN 1 .. cardinality(v_ids) LOOP
        user_id := v_users[v_i];
        operation_id := v_ids[v_i];
        BEGIN
            v_step := prme._execute_operation(user_id, operation_id, run_operations.worker, v_parts_left);
            outcome := v_step.outcome;
            v_parts_left := greatest(v_parts_left - v_step.parts_used, 1);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS
                v_sqlstate = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
            BEGIN
                outcome := prme._operation_failed(
                    user_id, operation_id, run_operations.worker, v_sqlstate, v_message, v_detail
                );
            EXCEPTION WHEN OTHERS THEN
                outcome := 'skipped';  -- could not even record the failure: try again later
            END;
        END;
        SELECT o.kind, o.state, o.attempts INTO kind, state, attempts
        FROM prme.operations AS o
        WHERE o.user_id = run_operations.user_id AND o.operation_id = run_operations.operation_id;
        RETURN NEXT;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION prme.run_operations(integer, text, integer) IS
'The executor: claims up to max_count claimable operations of any owner (FOR UPDATE SKIP LOCKED), applies '
'each through the API functions in this transaction (exactly once), and returns one row per claimed operation '
'with its state and the outcome of this call: committed, rejected, blocked, retry, progress (a long memory with '
'parts left; at most max_parts parts are validated per call) or skipped. worker names the caller in receipts.';

CREATE FUNCTION prme.ledger_status()
RETURNS TABLE (
    accepting boolean,
    ready bigint,
    blocked bigint,
    processing bigint,
    oldest_ready_at timestamptz,
    oldest_ready_age interval
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Each count reads one partial index, never the whole ledger.
    RETURN QUERY
    SELECT
        NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off',
        q.ready,
        (SELECT count(*) FROM prme.operations AS b WHERE b.state = 'blocked'),
        q.processing,
        q.oldest,
        now() - q.oldest
    FROM (
        SELECT
            count(*) FILTER (WHERE o.state = 'accepted') AS ready,
            count(*) FILTER (WHERE o.state = 'processing') AS processing,
            min(o.created_at) AS oldest
        FROM prme.operations AS o
        WHERE o.state IN ('accepted', 'processing')
    ) AS q;
END;
$$;

COMMENT ON FUNCTION prme.ledger_status() IS
'Readiness of the ledger across owners: whether this server accepts submits (not a read-only standby), '
'the executor''s backlog (accepted, blocked, processing) and the age of the oldest unfinished claimable operation.';

GRANT EXECUTE ON FUNCTION prme.run_operations(integer, text, integer) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.ledger_status() TO prme_app;

-- >>> sql/postgres/450_long_memories.sql

-- =============================================================================
-- prme-pg: long memories (add_node operations planned into parts)
--
-- An add_node whose content has more tokens than its token_budget (payload
-- field, default 512) is executed in parts, across as many executor calls as it
-- takes, and still becomes one memory:
--   1. plan: the content is cut into parts of at most token_budget tokens with
--      the built-in tokenizer words_v1 (a token is a maximal run of characters
--      other than ASCII space, tab, LF, VT, FF, CR; whitespace belongs to the
--      token after it, trailing whitespace to the last part). Each part is stored
--      with its token range, its character range and the sha256 of its text.
--   2. validate: a part is validated by cutting its range out of the payload
--      again and checking the hash, the token count and that it is not empty.
--      At most max_parts parts are validated per executor call, each call
--      commits its progress, so a restarted executor reuses the stored plan and
--      skips the parts already validated.
--   3. commit: once every part is validated, the memory's content is assembled
--      from the validated parts (their concatenation must be the payload's
--      content) and prme.add_node creates the one memory, in the transaction
--      that marks the operation committed.
-- The token budget counts words, not model tokens: a model tokenizer (tiktoken)
-- needs code outside the database. Parts are where per-part work (embeddings,
-- summaries) would attach; today the work is validation.
-- =============================================================================

CREATE TABLE prme.operation_parts (
    user_id text NOT NULL,
    operation_id uuid NOT NULL,
    part_no integer NOT NULL CHECK (part_no > 0),
    tokenizer text NOT NULL CHECK (tokenizer ~ '^[a-z][a-z0-9_:.-]{0,62}$'),
    token_start integer NOT NULL CHECK (token_start >= 0),
    token_end integer NOT NULL,
    char_start integer NOT NULL CHECK (char_start >= 0),
    char_end integer NOT NULL,
    sha256 text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    state text NOT NULL CHECK (state IN ('planned', 'validated')),
    planned_at timestamptz NOT NULL,
    validated_at timestamptz,
    PRIMARY KEY (user_id, operation_id, part_no),
    FOREIGN KEY (user_id, operation_id) REFERENCES prme.operations (user_id, operation_id),
    CHECK (token_end > token_start),
    CHECK (char_end > char_start),
    CHECK ((state = 'validated') = (validated_at IS NOT NULL))
);

COMMENT ON TABLE prme.operation_parts IS
'The plan of a long add_node operation: one row per part with its token and character ranges (half-open, '
'0-based), the sha256 of its text and whether it is validated. Kept after the memory is committed.';

CREATE FUNCTION prme._word_count(content text)
RETURNS integer
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT count(*) FROM regexp_matches(content, '[^\t\n\v\f\r ]+', 'g'));
END;
$$;

COMMENT ON FUNCTION prme._word_count(text) IS
'Internal: the number of words_v1 tokens in content (maximal runs without ASCII whitespace).';

CREATE FUNCTION prme._plan_parts(content text, token_budget integer)
RETURNS TABLE (part_no integer, token_start integer, token_end integer, char_start integer, char_end integer)
LANGUAGE plpgsql
IMMUTABLE
STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    WITH tokens AS (
        SELECT
            m.position::integer AS position,
            sum(length(m.match[1]) + length(m.match[2])) OVER (ORDER BY m.position)::integer AS end_char
        FROM regexp_matches(content, '([\t\n\v\f\r ]*)([^\t\n\v\f\r ]+)', 'g') WITH ORDINALITY AS m (match, position)
    ),
    parts AS (
        SELECT
            ((t.position - 1) / token_budget)::integer + 1 AS part_no,
            min(t.position)::integer - 1 AS token_start,
            max(t.position)::integer AS token_end,
            max(t.end_char) AS end_char
        FROM tokens AS t
        GROUP BY 1
    )
    SELECT
        p.part_no,
        p.token_start,
        p.token_end,
        coalesce(lag(p.end_char) OVER (ORDER BY p.part_no), 0),
        CASE WHEN p.part_no = max(p.part_no) OVER () THEN length(content) ELSE p.end_char END
    FROM parts AS p
    ORDER BY p.part_no;
END;
$$;

COMMENT ON FUNCTION prme._plan_parts(text, integer) IS
'Internal: cuts content into parts of at most token_budget words_v1 tokens: token and character ranges '
'(half-open, 0-based) that cover the whole text in order.';

CREATE FUNCTION prme._long_memory_step(
    op prme.operations,
    content text,
    token_budget integer,
    parts_budget integer,
    OUT complete boolean,
    OUT content_out text,
    OUT parts integer,
    OUT parts_done integer,
    OUT parts_validated integer
)
RETURNS record
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_part prme.operation_parts;
    v_text text;
BEGIN
    parts_validated := 0;
    -- 1. Plan once; a later call (after a restart too) finds the stored plan.
    PERFORM FROM prme.operation_parts AS p
    WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id
    LIMIT 1;
    IF NOT FOUND THEN
        INSERT INTO prme.operation_parts (
            user_id, operation_id, part_no, tokenizer, token_start, token_end, char_start, char_end,
            sha256, state, planned_at
        )
        SELECT
            op.user_id, op.operation_id, p.part_no, 'words_v1', p.token_start, p.token_end, p.char_start, p.char_end,
            prme._sha256_hex(substr(content, p.char_start + 1, p.char_end - p.char_start)), 'planned', now()
        FROM prme._plan_parts(content, token_budget) AS p;
    END IF;

    -- 2. Validate the next parts, skipping those already validated.
    FOR v_part IN
        SELECT p.* FROM prme.operation_parts AS p
        WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id AND p.state = 'planned'
        ORDER BY p.part_no
        LIMIT parts_budget
    LOOP
        v_text := substr(content, v_part.char_start + 1, v_part.char_end - v_part.char_start);
        IF v_part.tokenizer <> 'words_v1'
           OR length(v_text) <> v_part.char_end - v_part.char_start
           OR prme._sha256_hex(v_text) <> v_part.sha256
           OR prme._word_count(v_text) <> v_part.token_end - v_part.token_start THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422',
                MESSAGE = format('part %s of the stored plan does not match the payload', v_part.part_no);
        END IF;
        UPDATE prme.operation_parts AS p SET state = 'validated', validated_at = clock_timestamp()
        WHERE p.user_id = v_part.user_id AND p.operation_id = v_part.operation_id AND p.part_no = v_part.part_no;
        parts_validated := parts_validated + 1;
    END LOOP;

    SELECT count(*), count(*) FILTER (WHERE p.state = 'validated')
    INTO parts, parts_done
    FROM prme.operation_parts AS p
    WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id;
    complete := parts = parts_done;
    IF NOT complete THEN
        RETURN;
    END IF;

    -- 3. The memory is what the validated parts assemble to.
    SELECT string_agg(substr(content, p.char_start + 1, p.char_end - p.char_start), '' ORDER BY p.part_no)
    INTO content_out
    FROM prme.operation_parts AS p
    WHERE p.user_id = op.user_id AND p.operation_id = op.operation_id AND p.state = 'validated';
    IF content_out IS DISTINCT FROM content THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'the validated parts do not assemble the content';
    END IF;
END;
$$;

COMMENT ON FUNCTION prme._long_memory_step(prme.operations, text, integer, integer) IS
'Internal: one executor step of a long add_node: plans it into parts (once), validates up to parts_budget '
'parts, and once all are validated returns the content assembled from them (complete = true).';

CREATE FUNCTION prme.operation_parts(user_id text, operation_id uuid)
RETURNS TABLE (
    part_no integer,
    tokenizer text,
    token_start integer,
    token_end integer,
    char_start integer,
    char_end integer,
    sha256 text,
    state text,
    planned_at timestamptz,
    validated_at timestamptz
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(operation_parts.user_id);
BEGIN
    PERFORM FROM prme.operations AS o
    WHERE o.user_id = v_user_id AND o.operation_id = operation_parts.operation_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'operation not found';
    END IF;
    RETURN QUERY
    SELECT p.part_no, p.tokenizer, p.token_start, p.token_end, p.char_start, p.char_end, p.sha256, p.state,
        p.planned_at, p.validated_at
    FROM prme.operation_parts AS p
    WHERE p.user_id = v_user_id AND p.operation_id = operation_parts.operation_id
    ORDER BY p.part_no;
END;
$$;

COMMENT ON FUNCTION prme.operation_parts(text, uuid) IS
'The stored plan of a long add_node operation of user_id: its parts in order, with token and character ranges, '
'hash and state. No rows for an operation that was not planned; PR404 for an unknown operation.';

GRANT EXECUTE ON FUNCTION prme.operation_parts(text, uuid) TO prme_app;
ALTER TABLE prme.operation_parts ENABLE ROW LEVEL SECURITY;
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (5, 'operations_ledger', '50e46005c72179e0ae5191927c18872b7b8de27f003a7ff6a553d0e0eec3b029');

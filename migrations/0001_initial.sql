-- prme-pg migration 0001_initial: the first release of the prme schema.
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0001_initial.sql (or prme-pg migrate).
-- Its body is sql/postgres/010-135 as first released, in name order; later
-- migrations change some of those objects (sql/postgres/ shows them as they are now).

-- >>> sql/postgres/010_roles_and_schema.sql

-- =============================================================================
-- prme-pg: roles and schema
--
-- Three cluster-wide roles, created only when missing (roles outlive databases):
--   prme_owner   owns every prme object; NOLOGIN.
--   prme_app     USAGE on the schema, EXECUTE on API functions; no table access.
--   prme_reader  SELECT through row-level security, one owner at a time.
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
    FOREACH v_role IN ARRAY ARRAY['prme_owner', 'prme_app', 'prme_reader'] LOOP
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
GRANT USAGE ON SCHEMA prme TO prme_app, prme_reader;

SET LOCAL ROLE prme_owner;

-- Functions are executable by PUBLIC unless revoked, and that global default can
-- only be changed without IN SCHEMA. Every module still revokes explicitly.
ALTER DEFAULT PRIVILEGES FOR ROLE prme_owner REVOKE EXECUTE ON FUNCTIONS FROM public;

-- >>> sql/postgres/020_schema_migrations.sql

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

-- >>> sql/postgres/030_validation.sql

-- =============================================================================
-- prme-pg: argument validation
--
-- Each helper returns its argument unchanged or raises PR422, so API functions
-- validate with a plain assignment (`v_x := prme._valid_x(x)`), which PL/pgSQL
-- evaluates on its fast path without running a query.
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
    IF length(user_id) NOT BETWEEN 1 AND 256 OR user_id ~ '[\x01-\x1f\x7f-\x9f]' OR user_id <> btrim(user_id) THEN
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

-- >>> sql/postgres/040_nodes.sql

-- =============================================================================
-- prme-pg: nodes (memories)
--
-- One row per memory, keyed (user_id, id) so the table can be distributed by
-- owner. Numbers are numeric(5,4): caps hold exactly and journal records spell
-- them the same way in PostgreSQL, DuckDB and Python.
-- =============================================================================

CREATE TABLE prme.nodes (
    id uuid NOT NULL,
    user_id text NOT NULL,
    namespace text NOT NULL DEFAULT 'default' CHECK (namespace ~ '^[a-z][a-z0-9_-]{0,62}$'),
    scope text NOT NULL DEFAULT 'personal' CHECK (scope ~ '^[a-z][a-z0-9_-]{0,62}$'),
    kind text NOT NULL DEFAULT 'fact' CHECK (kind ~ '^[a-z][a-z0-9_-]{0,62}$'),
    content text NOT NULL,
    confidence_base numeric(5, 4) NOT NULL DEFAULT 0.5 CHECK (confidence_base BETWEEN 0 AND 1),
    salience_base numeric(5, 4) NOT NULL DEFAULT 0.5 CHECK (salience_base BETWEEN 0 AND 1),
    reinforcement_boost numeric(5, 4) NOT NULL DEFAULT 0 CHECK (reinforcement_boost BETWEEN 0 AND 1),
    last_reinforced_at timestamptz,
    evidence_refs uuid[] NOT NULL DEFAULT '{}' CHECK (array_position(evidence_refs, NULL) IS NULL),
    stability text NOT NULL DEFAULT 'low' CHECK (stability IN ('low', 'semi-stable', 'stable')),
    next_review_at timestamptz,
    lifecycle_state text NOT NULL DEFAULT 'active'
    CHECK (lifecycle_state IN ('active', 'contested', 'superseded', 'deprecated', 'archived')),
    decay_profile text NOT NULL DEFAULT 'medium'
    CHECK (decay_profile IN ('permanent', 'slow', 'medium', 'fast', 'rapid')),
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    version bigint NOT NULL CHECK (version > 0),
    -- Derived: checksum of this node's newest journal record, so a mutation finds
    -- its chain link under the row lock without reading the journal.
    last_checksum text NOT NULL CHECK (last_checksum ~ '^[0-9a-f]{64}$'),
    PRIMARY KEY (user_id, id)
);

COMMENT ON TABLE prme.nodes IS
'Memories. Every mutation bumps version and appends one prme.journal record in the same transaction.';
COMMENT ON COLUMN prme.nodes.evidence_refs IS
'Ids of the prme.events that confirmed this memory, appended in order, never de-duplicated.';
COMMENT ON COLUMN prme.nodes.last_checksum IS
'Derived: checksum of the newest journal record of this node (the link for the next record).';

-- What API functions return: the node (without derived columns) plus whether a
-- retried request was answered from its idempotency key.
CREATE TYPE prme.node_view AS (
    id uuid,
    user_id text,
    namespace text,
    scope text,
    kind text,
    content text,
    confidence_base numeric(5, 4),  -- noqa: LT01
    salience_base numeric(5, 4),  -- noqa: LT01
    reinforcement_boost numeric(5, 4),  -- noqa: LT01
    last_reinforced_at timestamptz,
    evidence_refs uuid[],  -- noqa: LT01
    stability text,
    next_review_at timestamptz,
    lifecycle_state text,
    decay_profile text,
    created_at timestamptz,
    updated_at timestamptz,
    version bigint,
    replayed boolean
);

COMMENT ON TYPE prme.node_view IS
'A memory as API functions return it: every column of prme.nodes but derived ones, plus replayed.';

CREATE FUNCTION prme._node_view(node prme.nodes, replayed boolean)
RETURNS prme.node_view
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN ROW(
        node.id, node.user_id, node.namespace, node.scope, node.kind, node.content,
        node.confidence_base, node.salience_base, node.reinforcement_boost, node.last_reinforced_at,
        node.evidence_refs, node.stability, node.next_review_at, node.lifecycle_state,
        node.decay_profile, node.created_at, node.updated_at, node.version, replayed
    )::prme.node_view;
END;
$$;

COMMENT ON FUNCTION prme._node_view(prme.nodes, boolean) IS
'Internal: the API view of a node row (drops derived columns, adds replayed).';

CREATE FUNCTION prme._json_time(value timestamptz)
RETURNS text
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- UTC, always six fractional digits: independent of the session's TimeZone and DateStyle.
    RETURN coalesce('"' || to_char(value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '"', 'null');
END;
$$;

COMMENT ON FUNCTION prme._json_time(timestamptz) IS
'Internal: a timestamp as a journal JSON value, "YYYY-MM-DDTHH:MM:SS.ffffffZ" in UTC, or null.';

CREATE FUNCTION prme._node_state(node prme.nodes)
RETURNS text
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- RFC 8785 text built directly: keys in sorted order, no whitespace. to_json()
    -- escapes strings exactly as RFC 8785 does; trim_scale() gives the shortest
    -- decimal form of a numeric(5,4) (0.6500 -> 0.65, 1.0000 -> 1).
    RETURN '{"confidence_base":' || trim_scale(node.confidence_base)::text
        || ',"content":' || to_json(node.content)::text
        || ',"created_at":' || prme._json_time(node.created_at)
        || ',"decay_profile":' || to_json(node.decay_profile)::text
        || ',"evidence_refs":' || array_to_json(node.evidence_refs)::text
        || ',"id":"' || node.id::text
        || '","kind":' || to_json(node.kind)::text
        || ',"last_reinforced_at":' || prme._json_time(node.last_reinforced_at)
        || ',"lifecycle_state":' || to_json(node.lifecycle_state)::text
        || ',"namespace":' || to_json(node.namespace)::text
        || ',"next_review_at":' || prme._json_time(node.next_review_at)
        || ',"reinforcement_boost":' || trim_scale(node.reinforcement_boost)::text
        || ',"salience_base":' || trim_scale(node.salience_base)::text
        || ',"scope":' || to_json(node.scope)::text
        || ',"stability":' || to_json(node.stability)::text
        || ',"updated_at":' || prme._json_time(node.updated_at)
        || ',"user_id":' || to_json(node.user_id)::text
        || ',"version":' || node.version::text
        || '}';
END;
$$;

COMMENT ON FUNCTION prme._node_state(prme.nodes) IS
'Internal: the complete state of a node as RFC 8785 canonical JSON, as journal records embed it '
'(every column but derived ones).';

-- >>> sql/postgres/050_events.sql

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

CREATE TRIGGER events_append_only
BEFORE UPDATE OR DELETE ON prme.events
FOR EACH ROW EXECUTE FUNCTION prme._refuse_change();

CREATE TRIGGER events_no_truncate
BEFORE TRUNCATE ON prme.events
FOR EACH STATEMENT EXECUTE FUNCTION prme._refuse_change();

-- >>> sql/postgres/060_journal.sql

-- =============================================================================
-- prme-pg: journal
--
-- One checksummed record per node mutation, appended in the mutation's own
-- transaction. The record is RFC 8785 canonical JSON stored exactly as hashed
-- (checksum = sha256 hex of its UTF-8 bytes), so verification never depends on
-- jsonb key order, TimeZone or extra_float_digits. Version 2 records carry
-- request_id and prev_checksum (a per-node hash chain, race-free under the node's
-- row lock); version 1 records have neither and verify under their own checksum.
-- See docs/JOURNAL.md.
-- =============================================================================

CREATE TABLE prme.journal (
    user_id text NOT NULL,
    node_id uuid NOT NULL,
    node_version bigint NOT NULL CHECK (node_version > 0),
    record_version smallint NOT NULL CHECK (record_version IN (1, 2)),
    op text NOT NULL,
    operation_id uuid NOT NULL,
    request_id uuid,
    evidence_id uuid,
    record text NOT NULL,
    checksum text NOT NULL CHECK (checksum ~ '^[0-9a-f]{64}$'),
    prev_checksum text CHECK (prev_checksum ~ '^[0-9a-f]{64}$'),
    recorded_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, node_id, node_version),
    FOREIGN KEY (user_id, node_id) REFERENCES prme.nodes (user_id, id),
    CHECK (record_version = 2 OR (request_id IS NULL AND prev_checksum IS NULL))
);

COMMENT ON TABLE prme.journal IS
'Append-only audit of node mutations: RFC 8785 record text, its sha256, and the per-node chain. See docs/JOURNAL.md.';
COMMENT ON COLUMN prme.journal.record IS
'Canonical JSON exactly as hashed. Every other column is a copy of a field of it, kept for indexing.';

CREATE TRIGGER journal_append_only
BEFORE UPDATE OR DELETE ON prme.journal
FOR EACH ROW EXECUTE FUNCTION prme._refuse_change();

CREATE TRIGGER journal_no_truncate
BEFORE TRUNCATE ON prme.journal
FOR EACH STATEMENT EXECUTE FUNCTION prme._refuse_change();

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

CREATE FUNCTION prme._journal_record_v2(
    op text,
    policy text,
    operation_id uuid,
    request_id uuid,
    user_id text,
    node_id uuid,
    evidence_id uuid,
    before_state text,
    after_state text,
    prev_checksum text,
    recorded_at timestamptz
)
RETURNS text
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Keys in RFC 8785 order (all ASCII, so code-unit order is byte order).
    RETURN '{"after":' || after_state
        || ',"before":' || coalesce(before_state, 'null')
        || ',"evidence_id":' || coalesce('"' || evidence_id::text || '"', 'null')
        || ',"node_id":"' || node_id::text
        || '","op":' || to_json(op)::text
        || ',"operation_id":"' || operation_id::text
        || '","policy":' || coalesce(to_json(policy)::text, 'null')
        || ',"prev_checksum":' || coalesce('"' || prev_checksum || '"', 'null')
        || ',"recorded_at":' || prme._json_time(recorded_at)
        || ',"request_id":' || coalesce('"' || request_id::text || '"', 'null')
        || ',"user_id":' || to_json(user_id)::text
        || ',"version":2}';
END;
$$;

COMMENT ON FUNCTION prme._journal_record_v2(text, text, uuid, uuid, text, uuid, uuid, text, text, text, timestamptz) IS
'Internal: the canonical text of a version 2 journal record. Pure, so other implementations '
'(the DuckDB port, the Python verifier) are tested byte for byte against it.';

CREATE FUNCTION prme._journal_entry(
    op text,
    policy text,
    operation_id uuid,
    request_id uuid,
    evidence_id uuid,
    before prme.nodes,
    after prme.nodes
)
RETURNS prme.journal
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_entry prme.journal;
BEGIN
    v_entry.user_id := after.user_id;
    v_entry.node_id := after.id;
    v_entry.node_version := after.version;
    v_entry.record_version := 2;
    v_entry.op := op;
    v_entry.operation_id := operation_id;
    v_entry.request_id := request_id;
    v_entry.evidence_id := evidence_id;
    v_entry.prev_checksum := before.last_checksum;
    v_entry.recorded_at := after.updated_at;
    v_entry.record := prme._journal_record_v2(
        op, policy, operation_id, request_id, after.user_id, after.id, evidence_id,
        CASE WHEN before.id IS NULL THEN NULL ELSE prme._node_state(before) END,
        prme._node_state(after),
        before.last_checksum,
        after.updated_at
    );
    v_entry.checksum := prme._sha256_hex(v_entry.record);
    RETURN v_entry;
END;
$$;

COMMENT ON FUNCTION prme._journal_entry(text, text, uuid, uuid, uuid, prme.nodes, prme.nodes) IS
'Internal: the journal row for a mutation from before (NULL on create) to after; the caller inserts it '
'and stores its checksum in nodes.last_checksum.';

CREATE FUNCTION prme._parse_record(record text)
RETURNS jsonb
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN record::jsonb;
EXCEPTION WHEN invalid_text_representation THEN
    RETURN NULL;  -- tampered text that is no longer JSON is reported, not raised
END;
$$;

COMMENT ON FUNCTION prme._parse_record(text) IS
'Internal: a journal record parsed as jsonb, or NULL when the text is not valid JSON.';

CREATE FUNCTION prme.verify_journal(user_id text)
RETURNS TABLE (node_id uuid, node_version bigint, problem text, detail text)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(verify_journal.user_id);
    v_entry prme.journal;
    v_doc jsonb;
    v_node_id uuid;
    v_expected_version bigint;
    v_prev_checksum text;
    v_prev_after jsonb;
BEGIN
    FOR v_entry IN
        SELECT j.* FROM prme.journal AS j
        WHERE j.user_id = v_user_id
        ORDER BY j.node_id, j.node_version
    LOOP
        IF v_entry.node_id IS DISTINCT FROM v_node_id THEN
            v_node_id := v_entry.node_id;
            v_expected_version := 1;
            v_prev_checksum := NULL;
            v_prev_after := NULL;
        END IF;
        node_id := v_entry.node_id;
        node_version := v_entry.node_version;

        IF prme._sha256_hex(v_entry.record) <> v_entry.checksum THEN
            problem := 'checksum_mismatch';
            detail := 'sha256 of the stored record text differs from the stored checksum';
            RETURN NEXT;
        END IF;

        v_doc := prme._parse_record(v_entry.record);
        IF v_doc IS NULL OR jsonb_typeof(v_doc) <> 'object' THEN
            problem := 'malformed_record';
            detail := 'the stored record text is not a JSON object';
            RETURN NEXT;
        ELSE
            IF v_doc ->> 'node_id' IS DISTINCT FROM v_entry.node_id::text
               OR v_doc ->> 'user_id' IS DISTINCT FROM v_entry.user_id
               OR v_doc ->> 'op' IS DISTINCT FROM v_entry.op
               OR v_doc ->> 'version' IS DISTINCT FROM v_entry.record_version::text
               OR v_doc ->> 'operation_id' IS DISTINCT FROM v_entry.operation_id::text
               OR v_doc ->> 'evidence_id' IS DISTINCT FROM v_entry.evidence_id::text
               OR v_doc -> 'after' ->> 'version' IS DISTINCT FROM v_entry.node_version::text
               OR (v_entry.record_version = 2 AND (
                   v_doc ->> 'request_id' IS DISTINCT FROM v_entry.request_id::text
                   OR v_doc ->> 'prev_checksum' IS DISTINCT FROM v_entry.prev_checksum))
            THEN
                problem := 'column_mismatch';
                detail := 'a column of the journal row disagrees with its record';
                RETURN NEXT;
            END IF;
            IF (v_doc -> 'before') IS DISTINCT FROM coalesce(v_prev_after, 'null'::jsonb) THEN
                problem := 'continuity_break';
                detail := 'before differs from the after of the previous record of this node';
                RETURN NEXT;
            END IF;
            v_prev_after := v_doc -> 'after';
        END IF;

        IF v_entry.node_version <> v_expected_version THEN
            problem := 'version_gap';
            detail := format('expected node version %s', v_expected_version);
            RETURN NEXT;
        END IF;
        IF v_entry.record_version = 2 AND v_entry.prev_checksum IS DISTINCT FROM v_prev_checksum THEN
            problem := 'chain_break';
            detail := format('prev_checksum %s does not name the previous record %s',
                coalesce(v_entry.prev_checksum, 'null'), coalesce(v_prev_checksum, 'null'));
            RETURN NEXT;
        END IF;
        v_expected_version := v_entry.node_version + 1;
        v_prev_checksum := v_entry.checksum;
    END LOOP;

    -- The head of each chain must be the record the node row points at; this
    -- catches a deleted newest record, which no later link would reveal.
    RETURN QUERY
    SELECT n.id, n.version, 'head_mismatch'::text,
        format('node points at %s, newest record is %s', n.last_checksum, coalesce(h.checksum, 'missing'))
    FROM prme.nodes AS n
    LEFT JOIN LATERAL (
        SELECT j.checksum, j.node_version FROM prme.journal AS j
        WHERE j.user_id = n.user_id AND j.node_id = n.id
        ORDER BY j.node_version DESC
        LIMIT 1
    ) AS h ON TRUE
    WHERE n.user_id = v_user_id
      AND (h.checksum IS DISTINCT FROM n.last_checksum OR h.node_version IS DISTINCT FROM n.version);
END;
$$;

COMMENT ON FUNCTION prme.verify_journal(text) IS
'Checks every journal record of one owner: checksum over the stored text, columns against the record, '
'version sequence, hash chain (v2), before/after continuity, and that each node points at its newest record. '
'Returns one row per problem; no rows means the journal verifies.';

-- >>> sql/postgres/070_request_keys.sql

-- =============================================================================
-- prme-pg: request_keys (idempotency keys)
--
-- A retried call with the same request_id must count once. A key is scoped to
-- (user_id, namespace): another owner's identical UUID is an independent key.
-- The row binds the key to what it did (operation, node, evidence) and to the
-- journal record it produced; it is written in the same transaction as that
-- record, so an aborted call leaves no key behind.
-- =============================================================================

CREATE TABLE prme.request_keys (
    user_id text NOT NULL,
    namespace text NOT NULL,
    request_id uuid NOT NULL,
    operation text NOT NULL CHECK (operation ~ '^[a-z][a-z0-9_]{0,62}$'),
    node_id uuid NOT NULL,
    evidence_id uuid,
    node_version bigint NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, namespace, request_id),
    FOREIGN KEY (user_id, node_id, node_version) REFERENCES prme.journal (user_id, node_id, node_version)
);

COMMENT ON TABLE prme.request_keys IS
'Idempotency keys per (user_id, namespace): what each request_id did and the journal record it wrote.';

-- >>> sql/postgres/080_add_node.sql

-- =============================================================================
-- prme-pg: add_node
-- =============================================================================

CREATE FUNCTION prme.add_node(
    user_id text,
    content text,
    scope text DEFAULT 'personal',
    namespace text DEFAULT 'default',
    kind text DEFAULT 'fact',
    confidence_base numeric DEFAULT 0.5,
    salience_base numeric DEFAULT 0.5,
    stability text DEFAULT 'low',
    decay_profile text DEFAULT 'medium',
    next_review_at timestamptz DEFAULT NULL,
    node_id uuid DEFAULT NULL
)
RETURNS prme.node_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_node prme.nodes;
    v_entry prme.journal;
    v_now timestamptz := now();
BEGIN
    v_node.id := coalesce(add_node.node_id, gen_random_uuid());
    v_node.user_id := prme._valid_user_id(add_node.user_id);
    v_node.namespace := prme._valid_name('namespace', add_node.namespace);
    v_node.scope := prme._valid_name('scope', add_node.scope);
    v_node.kind := prme._valid_name('kind', add_node.kind);
    v_node.content := prme._valid_content(add_node.content);
    v_node.confidence_base := prme._valid_fraction('confidence_base', add_node.confidence_base);
    v_node.salience_base := prme._valid_fraction('salience_base', add_node.salience_base);
    v_node.reinforcement_boost := 0;
    v_node.evidence_refs := '{}';
    IF add_node.stability IS NULL OR add_node.stability NOT IN ('low', 'semi-stable', 'stable') THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'stability must be low, semi-stable or stable';
    END IF;
    v_node.stability := add_node.stability;
    IF add_node.decay_profile IS NULL
       OR add_node.decay_profile NOT IN ('permanent', 'slow', 'medium', 'fast', 'rapid') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'decay_profile must be permanent, slow, medium, fast or rapid';
    END IF;
    v_node.decay_profile := add_node.decay_profile;
    v_node.next_review_at := prme._valid_timestamp('next_review_at', add_node.next_review_at);
    v_node.lifecycle_state := 'active';
    v_node.created_at := v_now;
    v_node.updated_at := v_now;
    v_node.version := 1;

    v_entry := prme._journal_entry('create', NULL, gen_random_uuid(), NULL, NULL, NULL, v_node);
    v_node.last_checksum := v_entry.checksum;

    INSERT INTO prme.nodes SELECT v_node.* ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR409', MESSAGE = 'a node with this node_id already exists';
    END IF;
    INSERT INTO prme.journal SELECT v_entry.*;
    RETURN prme._node_view(v_node, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.add_node(text, text, text, text, text, numeric, numeric, text, text, timestamptz, uuid) IS
'Creates a memory for user_id and journals it as a create record. node_id may be given (PR409 if taken); '
'otherwise a random one is chosen. Invalid arguments raise PR422.';

-- >>> sql/postgres/090_add_event.sql

-- =============================================================================
-- prme-pg: add_event
-- =============================================================================

CREATE FUNCTION prme.add_event(
    user_id text,
    content text,
    scope text DEFAULT 'personal',
    namespace text DEFAULT 'default',
    kind text DEFAULT 'message',
    payload jsonb DEFAULT '{}',
    occurred_at timestamptz DEFAULT NULL,
    event_id uuid DEFAULT NULL
)
RETURNS prme.events
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_event prme.events;
BEGIN
    v_event.id := coalesce(add_event.event_id, gen_random_uuid());
    v_event.user_id := prme._valid_user_id(add_event.user_id);
    v_event.namespace := prme._valid_name('namespace', add_event.namespace);
    v_event.scope := prme._valid_name('scope', add_event.scope);
    v_event.kind := prme._valid_name('kind', add_event.kind);
    v_event.content := prme._valid_content(add_event.content);
    IF add_event.payload IS NULL OR jsonb_typeof(add_event.payload) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must be a JSON object';
    END IF;
    IF octet_length(add_event.payload::text) > 65536 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must be at most 65536 bytes of JSON';
    END IF;
    v_event.payload := add_event.payload;
    v_event.created_at := now();
    v_event.occurred_at := coalesce(
        prme._valid_timestamp('occurred_at', add_event.occurred_at), v_event.created_at);

    INSERT INTO prme.events SELECT v_event.* ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR409', MESSAGE = 'an event with this event_id already exists';
    END IF;
    RETURN v_event;
END;
$$;

COMMENT ON FUNCTION prme.add_event(text, text, text, text, text, jsonb, timestamptz, uuid) IS
'Records immutable evidence for user_id. occurred_at defaults to now; event_id may be given (PR409 if taken).';

-- >>> sql/postgres/100_get_node.sql

-- =============================================================================
-- prme-pg: get_node and list_nodes (reads)
--
-- Reads show an owner's memories in every lifecycle state, archived included:
-- archiving retires a memory from confirmation and recall, not from its owner.
-- =============================================================================

CREATE FUNCTION prme.get_node(user_id text, node_id uuid)
RETURNS prme.node_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(get_node.user_id);
    v_node prme.nodes;
BEGIN
    IF get_node.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    SELECT * INTO v_node FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = get_node.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
    RETURN prme._node_view(v_node, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.get_node(text, uuid) IS
'Returns one memory of user_id. PR404 when it does not exist or belongs to another owner.';

CREATE FUNCTION prme.list_nodes(
    user_id text,
    namespace text DEFAULT NULL,
    after_node_id uuid DEFAULT NULL,
    max_count integer DEFAULT 100
)
RETURNS SETOF prme.node_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(list_nodes.user_id);
BEGIN
    IF list_nodes.namespace IS NOT NULL THEN
        PERFORM prme._valid_name('namespace', list_nodes.namespace);
    END IF;
    IF list_nodes.max_count IS NULL OR list_nodes.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    -- Keyset pagination over the primary key: pass the last id seen as after_node_id.
    RETURN QUERY
    SELECT (prme._node_view(n, FALSE)).*
    FROM prme.nodes AS n
    WHERE n.user_id = v_user_id
      AND (list_nodes.namespace IS NULL OR n.namespace = list_nodes.namespace)
      AND (list_nodes.after_node_id IS NULL OR n.id > list_nodes.after_node_id)
    ORDER BY n.id
    LIMIT list_nodes.max_count;
END;
$$;

COMMENT ON FUNCTION prme.list_nodes(text, text, uuid, integer) IS
'Pages through the memories of user_id in id order: pass the last id returned as after_node_id. '
'namespace filters when given; max_count is 1..10000.';

-- >>> sql/postgres/110_reinforce.sql

-- =============================================================================
-- prme-pg: reinforce (explicit confirmation of a memory)
--
-- The reference semantics are DESIGN.md section 3; in short:
--   1. validate; 2. a committed key for this same node and evidence is a replay:
--   return the current node, write nothing, take no row lock; a key bound to
--   anything else is PR409; 3. lock the node (missing, foreign or archived is
--   PR404) and re-check the key against a call that committed while we waited;
--   4. evidence must share the node's owner and scope; 5. additive caps that never
--   reduce; 6. journal record, then the key, in the same transaction.
-- =============================================================================

CREATE FUNCTION prme._reinforced_boost(boost numeric)
RETURNS numeric
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- +0.15 up to a cap of 0.5; a value already above the cap is kept, never reduced.
    RETURN greatest(boost, least(boost + 0.15, 0.5));
END;
$$;

COMMENT ON FUNCTION prme._reinforced_boost(numeric) IS
'Internal, policy additive_caps_v1: reinforcement_boost after one confirmation, greatest(b, least(b + 0.15, 0.5)).';

CREATE FUNCTION prme._reinforced_confidence(confidence numeric)
RETURNS numeric
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- +0.05 up to a cap of 0.95; a value already above the cap is kept, never reduced.
    RETURN greatest(confidence, least(confidence + 0.05, 0.95));
END;
$$;

COMMENT ON FUNCTION prme._reinforced_confidence(numeric) IS
'Internal, policy additive_caps_v1: confidence_base after one confirmation, greatest(c, least(c + 0.05, 0.95)).';

CREATE FUNCTION prme._key_replays(
    user_id text,
    namespace text,
    request_id uuid,
    operation text,
    node_id uuid,
    evidence_id uuid
)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_key prme.request_keys;
BEGIN
    SELECT k.* INTO v_key
    FROM prme.request_keys AS k
    WHERE k.user_id = _key_replays.user_id
      AND k.namespace = _key_replays.namespace
      AND k.request_id = _key_replays.request_id;
    IF NOT FOUND THEN
        RETURN FALSE;
    END IF;
    IF v_key.operation = _key_replays.operation AND v_key.node_id = _key_replays.node_id
       AND v_key.evidence_id IS NOT DISTINCT FROM _key_replays.evidence_id THEN
        RETURN TRUE;
    END IF;
    RAISE EXCEPTION USING
        ERRCODE = 'PR409',
        MESSAGE = 'request_id was already used for another request',
        DETAIL = 'an idempotency key is bound to one operation, node and evidence';
END;
$$;

COMMENT ON FUNCTION prme._key_replays(text, text, uuid, text, uuid, uuid) IS
'Internal (volatile on purpose: each call reads with a fresh snapshot, so it sees keys committed while the '
'caller waited for a row lock): true when a committed key binds request_id to this same operation, node and evidence (a replay); '
'false when the key is unused; PR409 when it is bound to anything else.';

CREATE FUNCTION prme.reinforce(
    node_id uuid,
    user_id text,
    evidence_id uuid DEFAULT NULL,
    request_id uuid DEFAULT NULL
)
RETURNS prme.node_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(reinforce.user_id);
    v_node prme.nodes;
    v_after prme.nodes;
    v_entry prme.journal;
    v_now timestamptz := now();
BEGIN
    IF reinforce.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;

    -- 2. Replay check before any lock: a plain read, no WAL.
    IF reinforce.request_id IS NOT NULL THEN
        SELECT n.* INTO v_node
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id AND n.id = reinforce.node_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
        END IF;
        IF prme._key_replays(
            v_user_id, v_node.namespace, reinforce.request_id, 'reinforce', reinforce.node_id, reinforce.evidence_id
        ) THEN
            -- Read the node again: the call that committed the key may have committed
            -- after the read above, and a replay returns the current node. Seeing the
            -- key guarantees this new snapshot sees that call's update too.
            SELECT n.* INTO v_node
            FROM prme.nodes AS n
            WHERE n.user_id = v_user_id AND n.id = reinforce.node_id;
            RETURN prme._node_view(v_node, TRUE);
        END IF;
    END IF;

    -- 3. Lock the node; missing, foreign and archived nodes are all "not found".
    SELECT n.* INTO v_node
    FROM prme.nodes AS n
    WHERE n.user_id = v_user_id AND n.id = reinforce.node_id
    FOR UPDATE;
    IF NOT FOUND OR v_node.lifecycle_state = 'archived' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;

    -- 4. Evidence must be an event of the same owner and scope.
    IF reinforce.evidence_id IS NOT NULL THEN
        PERFORM FROM prme.events AS e
        WHERE e.user_id = v_user_id AND e.id = reinforce.evidence_id AND e.scope = v_node.scope;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'evidence not found';
        END IF;
    END IF;

    -- Re-check the key under the row lock: a call with this key on this node that
    -- committed while we waited for the lock is visible to this new statement.
    IF reinforce.request_id IS NOT NULL AND prme._key_replays(
        v_user_id, v_node.namespace, reinforce.request_id, 'reinforce', reinforce.node_id, reinforce.evidence_id
    ) THEN
        RETURN prme._node_view(v_node, TRUE);
    END IF;

    -- 5. Additive caps; salience_base is unchanged.
    v_after := v_node;
    v_after.reinforcement_boost := prme._reinforced_boost(v_node.reinforcement_boost);
    v_after.confidence_base := prme._reinforced_confidence(v_node.confidence_base);
    v_after.last_reinforced_at := v_now;
    v_after.updated_at := v_now;
    IF reinforce.evidence_id IS NOT NULL THEN
        v_after.evidence_refs := v_node.evidence_refs || reinforce.evidence_id;
    END IF;
    v_after.version := v_node.version + 1;

    -- 6. Journal record, chained to the node's previous record.
    v_entry := prme._journal_entry(
        'reinforce', 'additive_caps_v1', gen_random_uuid(), reinforce.request_id, reinforce.evidence_id,
        v_node, v_after
    );
    v_after.last_checksum := v_entry.checksum;

    UPDATE prme.nodes AS n SET
        reinforcement_boost = v_after.reinforcement_boost,
        confidence_base = v_after.confidence_base,
        last_reinforced_at = v_after.last_reinforced_at,
        updated_at = v_after.updated_at,
        evidence_refs = v_after.evidence_refs,
        version = v_after.version,
        last_checksum = v_after.last_checksum
    WHERE n.user_id = v_user_id AND n.id = reinforce.node_id;
    INSERT INTO prme.journal SELECT v_entry.*;

    -- Claim the key last, once the journal record it names exists. Calls on this
    -- node are serialised by the row lock, so a conflict here can only be a
    -- concurrent call that bound this key to another node of the namespace:
    -- PR409, which also undoes this call's update and record.
    IF reinforce.request_id IS NOT NULL THEN
        INSERT INTO prme.request_keys (
            user_id, namespace, request_id, operation, node_id, evidence_id, node_version, created_at
        ) VALUES (
            v_user_id, v_node.namespace, reinforce.request_id, 'reinforce', reinforce.node_id,
            reinforce.evidence_id, v_after.version, v_now
        )
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR409',
                MESSAGE = 'request_id was already used for another request',
                DETAIL = 'an idempotency key is bound to one operation, node and evidence';
        END IF;
    END IF;

    RETURN prme._node_view(v_after, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.reinforce(uuid, text, uuid, uuid) IS
'Confirms a memory of user_id (DESIGN.md section 3): boost +0.15 capped at 0.5, confidence +0.05 capped at 0.95, '
'never reduced; evidence_id appended to evidence_refs; journaled. With request_id, a retry of the same call '
'returns the current node with replayed = true and writes nothing; reuse for anything else raises PR409. '
'PR404 for a missing, foreign or archived node, or evidence of another owner or scope.';

-- >>> sql/postgres/120_archive_node.sql

-- =============================================================================
-- prme-pg: archive_node
--
-- Archiving retires a memory: it can no longer be confirmed (reinforce treats it
-- as not found) but stays readable by its owner and in the journal.
-- =============================================================================

CREATE FUNCTION prme.archive_node(user_id text, node_id uuid)
RETURNS prme.node_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(archive_node.user_id);
    v_node prme.nodes;
    v_after prme.nodes;
    v_entry prme.journal;
BEGIN
    IF archive_node.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    SELECT n.* INTO v_node
    FROM prme.nodes AS n
    WHERE n.user_id = v_user_id AND n.id = archive_node.node_id
    FOR UPDATE;
    IF NOT FOUND OR v_node.lifecycle_state = 'archived' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;

    v_after := v_node;
    v_after.lifecycle_state := 'archived';
    v_after.updated_at := now();
    v_after.version := v_node.version + 1;
    v_entry := prme._journal_entry('archive', NULL, gen_random_uuid(), NULL, NULL, v_node, v_after);
    v_after.last_checksum := v_entry.checksum;

    UPDATE prme.nodes AS n SET
        lifecycle_state = v_after.lifecycle_state,
        updated_at = v_after.updated_at,
        version = v_after.version,
        last_checksum = v_after.last_checksum
    WHERE n.user_id = v_user_id AND n.id = archive_node.node_id;
    INSERT INTO prme.journal SELECT v_entry.*;

    RETURN prme._node_view(v_after, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.archive_node(text, uuid) IS
'Archives a memory of user_id and journals it. PR404 when it is missing, foreign or already archived.';

-- >>> sql/postgres/130_replay_node.sql

-- =============================================================================
-- prme-pg: replay_node
--
-- Rebuilds a node from its journal chain and compares the result with the stored
-- row. Reinforce records are re-derived from their before state with the policy
-- they name, so a record whose after does not follow from its rule is caught too.
-- =============================================================================

CREATE FUNCTION prme.replay_node(user_id text, node_id uuid)
RETURNS TABLE (records integer, matches boolean, problem text, stored jsonb, replayed jsonb)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(replay_node.user_id);
    v_node prme.nodes;
    v_record text;
    v_doc jsonb;
    v_state jsonb;
    v_expected jsonb;
    v_refs jsonb;
BEGIN
    IF replay_node.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    SELECT n.* INTO v_node FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = replay_node.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
    records := 0;
    stored := prme._node_state(v_node)::jsonb;

    FOR v_record IN
        SELECT j.record FROM prme.journal AS j
        WHERE j.user_id = v_user_id AND j.node_id = v_node.id
        ORDER BY j.node_version
    LOOP
        records := records + 1;
        v_doc := prme._parse_record(v_record);
        IF v_doc IS NULL THEN
            problem := format('record %s is not valid JSON', records);
            EXIT;
        END IF;
        IF (v_doc -> 'before') IS DISTINCT FROM coalesce(v_state, 'null'::jsonb) THEN
            problem := format('record %s: before differs from the state replayed so far', records);
            EXIT;
        END IF;
        IF v_doc ->> 'op' = 'reinforce' AND v_doc ->> 'policy' = 'additive_caps_v1' THEN
            v_refs := v_state -> 'evidence_refs';
            IF jsonb_typeof(v_doc -> 'evidence_id') = 'string' THEN
                v_refs := v_refs || jsonb_build_array(v_doc -> 'evidence_id');
            END IF;
            v_expected := v_state || jsonb_build_object(
                'reinforcement_boost', prme._reinforced_boost((v_state ->> 'reinforcement_boost')::numeric),
                'confidence_base', prme._reinforced_confidence((v_state ->> 'confidence_base')::numeric),
                'last_reinforced_at', v_doc -> 'recorded_at',
                'updated_at', v_doc -> 'recorded_at',
                'evidence_refs', v_refs,
                'version', (v_state ->> 'version')::bigint + 1
            );
            IF v_expected IS DISTINCT FROM (v_doc -> 'after') THEN
                problem := format('record %s: after does not follow from before under additive_caps_v1', records);
                EXIT;
            END IF;
        END IF;
        v_state := v_doc -> 'after';
    END LOOP;

    replayed := v_state;
    matches := problem IS NULL AND v_state IS NOT DISTINCT FROM stored;
    IF problem IS NULL AND NOT matches THEN
        problem := CASE WHEN v_state IS NULL THEN 'no journal records' ELSE 'stored row differs from replay' END;
    END IF;
    RETURN NEXT;
END;
$$;

COMMENT ON FUNCTION prme.replay_node(text, uuid) IS
'Rebuilds a memory of user_id from its journal (re-deriving reinforce records from their policy) and compares '
'it with the stored row: one row with matches, the first problem found, and both states. PR404 if not found.';

-- >>> sql/postgres/135_security.sql

-- =============================================================================
-- prme-pg: privileges and row-level security
--
-- prme_app executes the API functions and nothing else: no table privileges,
-- no internal helpers (names starting with _). prme_reader reads through
-- row-level security, one owner at a time, chosen with
--   SET prme.user_id = 'alice';
-- The API functions run as prme_owner (SECURITY DEFINER), which owns the tables
-- and so is not subject to these policies; they filter by owner themselves.
-- =============================================================================

REVOKE ALL ON ALL TABLES IN SCHEMA prme FROM public;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA prme FROM public;

GRANT EXECUTE ON FUNCTION prme.add_node(text, text, text, text, text, numeric, numeric, text, text, timestamptz, uuid) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.add_event(text, text, text, text, text, jsonb, timestamptz, uuid) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.get_node(text, uuid) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.list_nodes(text, text, uuid, integer) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.reinforce(uuid, text, uuid, uuid) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.archive_node(text, uuid) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.verify_journal(text) TO prme_app;
GRANT EXECUTE ON FUNCTION prme.replay_node(text, uuid) TO prme_app;

GRANT SELECT ON prme.nodes, prme.events, prme.journal TO prme_reader;

ALTER TABLE prme.nodes ENABLE ROW LEVEL SECURITY;
ALTER TABLE prme.events ENABLE ROW LEVEL SECURITY;
ALTER TABLE prme.journal ENABLE ROW LEVEL SECURITY;
ALTER TABLE prme.request_keys ENABLE ROW LEVEL SECURITY;

CREATE POLICY nodes_reader_owner ON prme.nodes FOR SELECT TO prme_reader
USING (user_id = current_setting('prme.user_id', TRUE));
CREATE POLICY events_reader_owner ON prme.events FOR SELECT TO prme_reader
USING (user_id = current_setting('prme.user_id', TRUE));
CREATE POLICY journal_reader_owner ON prme.journal FOR SELECT TO prme_reader
USING (user_id = current_setting('prme.user_id', TRUE));
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (1, 'initial', '8015df5066edf9dcb39b8da0c8c376930204ce7fba1c2dc3ca579def63f0bb42');

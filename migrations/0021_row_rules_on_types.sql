-- prme-pg migration 0021_row_rules_on_types: a confirmation at the cost of its two writes (issue 15).
--
-- 1. The value rules of prme.nodes and prme.journal move from table CHECK constraints to
--    the columns' types (domains, sql/postgres/035_domains.sql), with the same rules and the
--    same SQLSTATE (23514). PostgreSQL reads every CHECK constraint of a table back from its
--    text and plans it once per writing statement, and evaluates all of them on every
--    UPDATE, whatever it sets: for a confirmation's two rows that was about half the cost
--    of the writes. A domain's check is planned once per session and runs only for the
--    columns a statement writes. The checksum rule is no longer a regular expression
--    ({64} made PostgreSQL's matcher about five times slower). The maintenance counters of
--    0018 get the non-negative rule they had to go without (prme.counter): it now costs a
--    confirmation nothing.
-- 2. prme.reinforce reads the node without a row lock and writes it and its journal record
--    in one statement, guarded by the version it read (a concurrent change makes it read
--    again): two statements for a fresh confirmation instead of six, and no lock record in
--    the WAL. The key's advisory lock no longer needs the node's namespace:
--    prme._key_lock(user_id, request_id) replaces prme._key_lock(user_id, namespace,
--    request_id), taken by reinforce and record_outcome alike.
-- 3. A journal record's node states are built with fewer function calls (one format()
--    instead of a chain of ||, the JSON quotes of a timestamp from to_char's pattern), and
--    prme._node_view is a SQL-standard body inlined into its callers: PostgreSQL sets up
--    every call of an expression again in each transaction. The bytes are the same.
-- 4. Functions that RETURN QUERY a column whose type is now a domain cast it to the type
--    they declare (RETURN QUERY requires exact types): verify_journal, journal_records,
--    node_journal, effective_nodes, recall, maintenance_report. Their results are unchanged.
--
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0021_row_rules_on_types.sql
-- (or prme-pg migrate). Locks: ACCESS EXCLUSIVE on prme.nodes and prme.journal until
-- commit. No table is rewritten and no index rebuilt (each new type is its old type with a
-- rule, so the stored values stay as they are; tests/test_migrations.py checks the files);
-- each domain's rule is checked once over the rows that use it, a read of both tables per
-- domain. Measured here: 15.6 s for 1,000,000 memories with one journal record each (2 GB),
-- on this shared 2-core machine while a test suite ran.
-- During the upgrade a confirmation that runs the old function and one that runs the new
-- one with the same key take different advisory locks; the journal's unique key index
-- still lets only one of them count (on one node the other then replays; on two nodes it gets
-- a unique violation): never a double count.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/035_domains.sql (each created without its rule, added below)

CREATE DOMAIN prme.slug AS text;
CREATE DOMAIN prme.sha256_digest AS text;
CREATE DOMAIN prme.unit_interval AS numeric(5, 4);
CREATE DOMAIN prme.stability AS text;
CREATE DOMAIN prme.lifecycle_state AS text;
CREATE DOMAIN prme.decay_profile AS text;
CREATE DOMAIN prme.uuid_list AS uuid [];
CREATE DOMAIN prme.version_number AS bigint;
CREATE DOMAIN prme.counter AS bigint;

-- A SQL-standard body depends on the columns it reads: _node_state goes while they change type.
DROP FUNCTION prme._node_state(prme.nodes);

ALTER TABLE prme.nodes
    DROP CONSTRAINT nodes_namespace_check,
    DROP CONSTRAINT nodes_scope_check,
    DROP CONSTRAINT nodes_kind_check,
    DROP CONSTRAINT nodes_confidence_base_check,
    DROP CONSTRAINT nodes_salience_base_check,
    DROP CONSTRAINT nodes_reinforcement_boost_check,
    DROP CONSTRAINT nodes_evidence_refs_check,
    DROP CONSTRAINT nodes_stability_check,
    DROP CONSTRAINT nodes_lifecycle_state_check,
    DROP CONSTRAINT nodes_decay_profile_check,
    DROP CONSTRAINT nodes_version_check,
    DROP CONSTRAINT nodes_last_checksum_check,
    DROP CONSTRAINT nodes_reinforcements_check,
    ALTER COLUMN namespace TYPE prme.slug,
    ALTER COLUMN scope TYPE prme.slug,
    ALTER COLUMN kind TYPE prme.slug,
    ALTER COLUMN confidence_base TYPE prme.unit_interval,
    ALTER COLUMN salience_base TYPE prme.unit_interval,
    ALTER COLUMN reinforcement_boost TYPE prme.unit_interval,
    ALTER COLUMN evidence_refs TYPE prme.uuid_list,
    ALTER COLUMN stability TYPE prme.stability,
    ALTER COLUMN lifecycle_state TYPE prme.lifecycle_state,
    ALTER COLUMN decay_profile TYPE prme.decay_profile,
    ALTER COLUMN version TYPE prme.version_number,
    ALTER COLUMN last_checksum TYPE prme.sha256_digest,
    ALTER COLUMN reinforcements TYPE prme.counter,
    ALTER COLUMN recorded_reinforcements TYPE prme.counter,
    ALTER COLUMN implicit_successes TYPE prme.counter,
    ALTER COLUMN neutral_exposures TYPE prme.counter,
    ALTER COLUMN explicit_corrections TYPE prme.counter,
    ALTER COLUMN reviewed_explicit_reinforcements TYPE prme.counter,
    ALTER COLUMN reviewed_implicit_successes TYPE prme.counter,
    ALTER COLUMN reviewed_neutral_exposures TYPE prme.counter,
    ALTER COLUMN reviewed_explicit_corrections TYPE prme.counter;

ALTER TABLE prme.journal
    DROP CONSTRAINT journal_node_version_check,
    DROP CONSTRAINT journal_checksum_check,
    DROP CONSTRAINT journal_prev_checksum_check,
    ALTER COLUMN node_version TYPE prme.version_number,
    ALTER COLUMN checksum TYPE prme.sha256_digest,
    ALTER COLUMN prev_checksum TYPE prme.sha256_digest;

-- The rules, each checked once over the rows that hold the domain.
ALTER DOMAIN prme.slug ADD CONSTRAINT slug_check CHECK (VALUE ~ '^[a-z][a-z0-9_-]{0,62}$');
ALTER DOMAIN prme.sha256_digest
ADD CONSTRAINT sha256_digest_check CHECK (length(VALUE) = 64 AND ltrim(VALUE, '0123456789abcdef') = '');
ALTER DOMAIN prme.unit_interval ADD CONSTRAINT unit_interval_check CHECK (VALUE BETWEEN 0 AND 1);
ALTER DOMAIN prme.stability ADD CONSTRAINT stability_check CHECK (VALUE IN ('low', 'semi-stable', 'stable'));
ALTER DOMAIN prme.lifecycle_state
ADD CONSTRAINT lifecycle_state_check CHECK (VALUE IN ('active', 'contested', 'superseded', 'deprecated', 'archived'));
ALTER DOMAIN prme.decay_profile
ADD CONSTRAINT decay_profile_check CHECK (VALUE IN ('permanent', 'slow', 'medium', 'fast', 'rapid'));
ALTER DOMAIN prme.uuid_list ADD CONSTRAINT uuid_list_check CHECK (array_position(VALUE, NULL) IS NULL);
ALTER DOMAIN prme.version_number ADD CONSTRAINT version_number_check CHECK (VALUE > 0);
ALTER DOMAIN prme.counter ADD CONSTRAINT counter_check CHECK (VALUE >= 0);

COMMENT ON DOMAIN prme.slug IS
'A lowercase name: a letter, then up to 62 letters, digits, _ or -. namespace, scope and kind of a memory.';

COMMENT ON DOMAIN prme.sha256_digest IS
'A sha256 digest as 64 lowercase hexadecimal digits.';

COMMENT ON DOMAIN prme.unit_interval IS
'A numeric(5,4) from 0 to 1: confidence_base, salience_base and reinforcement_boost of a memory.';

COMMENT ON DOMAIN prme.stability IS
'How settled a memory is: low, semi-stable or stable.';

COMMENT ON DOMAIN prme.lifecycle_state IS
'Where a memory is in its life: active, contested, superseded, deprecated or archived.';

COMMENT ON DOMAIN prme.decay_profile IS
'How fast a memory''s confidence decays between reviews: permanent, slow, medium, fast or rapid.';

COMMENT ON DOMAIN prme.uuid_list IS
'An ordered list of uuids without NULL elements (a memory''s evidence_refs).';

COMMENT ON DOMAIN prme.version_number IS
'A memory''s version, from 1 (its creation); each mutation adds one.';

COMMENT ON DOMAIN prme.counter IS
'A count of events, never negative.';

-- A session that ran a PL/pgSQL function before this upgrade keeps its compiled form,
-- whose plans expect the old types of the columns of its row variables ("type of
-- parameter does not match that when preparing the plan"). Touching each function's
-- catalog row, changing nothing, makes every session compile it anew on its next call.
DO $$
DECLARE
    v_function record;
BEGIN
    FOR v_function IN
        SELECT p.oid::regprocedure AS signature, p.procost
        FROM pg_proc AS p
        WHERE p.pronamespace = 'prme'::regnamespace AND p.proowner = current_user::regrole
          AND p.prolang = (SELECT l.oid FROM pg_language AS l WHERE l.lanname = 'plpgsql')
    LOOP
        EXECUTE format('ALTER FUNCTION %s COST %s', v_function.signature, v_function.procost);
    END LOOP;
END;
$$;

-- >>> sql/postgres/025_helpers.sql

CREATE OR REPLACE FUNCTION prme._json_time(value timestamptz)
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

-- >>> sql/postgres/040_nodes.sql

CREATE FUNCTION prme._node_state(node prme.nodes)
RETURNS text
LANGUAGE sql
STABLE
PARALLEL SAFE
-- RFC 8785 text built directly: keys in sorted order, no whitespace. to_json()
-- escapes strings exactly as RFC 8785 does; trim_scale() gives the shortest
-- decimal form of a numeric(5,4) (0.6500 -> 0.65, 1.0000 -> 1). One format()
-- rather than a chain of ||: each transaction sets up every function call of the
-- expression again, so fewer calls make every confirmation cheaper.
RETURN format(
    '{"confidence_base":%s,"content":%s,"created_at":%s,"decay_profile":%s,"evidence_refs":%s,"id":"%s",'
    '"kind":%s,"last_reinforced_at":%s,"lifecycle_state":%s,"namespace":%s,"next_review_at":%s,'
    '"reinforcement_boost":%s,"salience_base":%s,"scope":%s,"stability":%s,"updated_at":%s,"user_id":%s,'
    '"version":%s}',
    trim_scale(node.confidence_base), to_json(node.content), prme._json_time(node.created_at),
    to_json(node.decay_profile), array_to_json(node.evidence_refs), node.id, to_json(node.kind),
    prme._json_time(node.last_reinforced_at), to_json(node.lifecycle_state), to_json(node.namespace),
    prme._json_time(node.next_review_at), trim_scale(node.reinforcement_boost), trim_scale(node.salience_base),
    to_json(node.scope), to_json(node.stability), prme._json_time(node.updated_at), to_json(node.user_id),
    node.version
);

COMMENT ON FUNCTION prme._node_state(prme.nodes) IS
'Internal: the complete state of a node as RFC 8785 canonical JSON, as journal records embed it '
'(every column but derived ones).';

CREATE OR REPLACE FUNCTION prme._node_view(node prme.nodes, replayed boolean)
RETURNS prme.node_view
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN ROW(  -- noqa: CP03
    node.id, node.user_id, node.namespace, node.scope, node.kind, node.content,
    node.confidence_base, node.salience_base, node.reinforcement_boost, node.last_reinforced_at,
    node.evidence_refs, node.stability, node.next_review_at, node.lifecycle_state,
    node.decay_profile, node.created_at, node.updated_at, node.version, replayed
)::prme.node_view;

COMMENT ON FUNCTION prme._node_view(prme.nodes, boolean) IS
'Internal: the API view of a node row (drops derived columns, adds replayed).';

COMMENT ON FUNCTION prme._node_state(prme.nodes) IS
'Internal: the complete state of a node as RFC 8785 canonical JSON, as journal records embed it '
'(every column but derived ones).';

-- >>> sql/postgres/060_journal.sql

CREATE OR REPLACE FUNCTION prme.verify_journal(user_id text)
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
                   OR v_doc ->> 'prev_checksum' IS DISTINCT FROM v_entry.prev_checksum
                   OR v_entry.key_namespace IS DISTINCT FROM
                   CASE WHEN v_entry.request_id IS NOT NULL THEN v_doc -> 'after' ->> 'namespace' END))
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
    SELECT n.id, n.version::bigint, 'head_mismatch'::text,
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

    -- Records whose node row is gone: their chain may still verify, so only the
    -- missing row shows that a node was deleted. Reported at the newest record.
    RETURN QUERY
    SELECT j.node_id, max(j.node_version)::bigint, 'node_missing'::text,
        format('no node row for its %s journal record(s)', count(*))
    FROM prme.journal AS j
    WHERE j.user_id = v_user_id
      AND NOT EXISTS (SELECT FROM prme.nodes AS n WHERE n.user_id = j.user_id AND n.id = j.node_id)
    GROUP BY j.node_id
    ORDER BY j.node_id;
END;
$$;

COMMENT ON FUNCTION prme.verify_journal(text) IS
'Checks every journal record of one owner: checksum over the stored text, columns against the record, '
'version sequence, hash chain (v2), before/after continuity, that each node points at its newest record, and '
'that every chain has its node. Returns one row per problem; no rows means the journal verifies.';

-- >>> sql/postgres/070_request_keys.sql

DROP FUNCTION prme._key_lock(text, text, uuid);

CREATE OR REPLACE FUNCTION prme._key_lock(user_id text, request_id uuid)
RETURNS bigint
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN hashtextextended(user_id || '/' || request_id::text, 0);

COMMENT ON FUNCTION prme._key_lock(text, uuid) IS
'Internal: the transaction advisory lock key of an owner''s request_id. The calls that claim a key in different '
'places (reinforce: its journal record; record_outcome: prme.request_keys) hold it while they check and claim, '
'so a key reused by another kind of call is PR409 even when both race. A hash collision only makes two '
'calls wait for each other.';

-- >>> sql/postgres/110_reinforce.sql

CREATE OR REPLACE FUNCTION prme.reinforce(
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

    -- 2. The key's advisory lock (memory only, no WAL) before anything is read. Every
    -- call that claims a key holds it until it commits, so the key's state seen by
    -- any read below stays its state until this call commits.
    IF reinforce.request_id IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(prme._key_lock(v_user_id, reinforce.request_id));
    END IF;

    LOOP
        -- 3. The node as it is, if it can be confirmed: a plain read, no row lock.
        SELECT n.* INTO v_node
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id AND n.id = reinforce.node_id
          AND n.lifecycle_state <> 'archived'
          -- The key unused, in both places a key lives (070_request_keys.sql;
          -- prme._is_replay gives the verdict when it is used).
          AND (reinforce.request_id IS NULL OR NOT EXISTS (
              SELECT FROM prme.journal AS j
              WHERE j.user_id = n.user_id AND j.key_namespace = n.namespace AND j.request_id = reinforce.request_id
          ) AND NOT EXISTS (
              SELECT FROM prme.request_keys AS k
              WHERE k.user_id = n.user_id AND k.namespace = n.namespace AND k.request_id = reinforce.request_id
          ))
          AND (reinforce.evidence_id IS NULL OR EXISTS (
              SELECT FROM prme.events AS e
              WHERE e.user_id = n.user_id AND e.id = reinforce.evidence_id AND e.scope = n.scope
          ));
        IF NOT FOUND THEN
            -- Why not, read again. A replay returns the node as this read sees it:
            -- the call that claimed the key committed its update before the key.
            SELECT n.* INTO v_node
            FROM prme.nodes AS n
            WHERE n.user_id = v_user_id AND n.id = reinforce.node_id;
            IF NOT FOUND THEN
                RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
            END IF;
            IF reinforce.request_id IS NOT NULL AND prme._is_replay(
                v_user_id, v_node.namespace, reinforce.request_id, 'reinforce', reinforce.node_id,
                reinforce.evidence_id
            ) THEN
                RETURN prme._node_view(v_node, TRUE);
            END IF;
            IF v_node.lifecycle_state = 'archived' THEN
                RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
            END IF;
            IF reinforce.evidence_id IS NOT NULL THEN
                PERFORM FROM prme.events AS e
                WHERE e.user_id = v_user_id AND e.id = reinforce.evidence_id AND e.scope = v_node.scope;
                IF NOT FOUND THEN
                    RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'evidence not found';
                END IF;
            END IF;
            CONTINUE;  -- it changed between the two reads: read it again
        END IF;

        -- 4. Additive caps; salience_base is unchanged.
        v_after := v_node;
        v_after.reinforcement_boost := prme._reinforced_boost(v_node.reinforcement_boost);
        v_after.confidence_base := prme._reinforced_confidence(v_node.confidence_base);
        v_after.last_reinforced_at := v_now;
        v_after.updated_at := v_now;
        IF reinforce.evidence_id IS NOT NULL THEN
            v_after.evidence_refs := v_node.evidence_refs || reinforce.evidence_id;
        END IF;
        v_after.version := v_node.version + 1;

        -- 5. The journal record, chained to the node's previous record; it carries the key.
        v_entry := prme._journal_entry(
            'reinforce', 'additive_caps_v1', gen_random_uuid(), reinforce.request_id, reinforce.evidence_id,
            v_node, v_after
        );

        -- Both writes in one statement, only if the node is still the version read
        -- (an UPDATE waits for a concurrent writer's commit and then sees its
        -- version). The UPDATE is HOT: no column it sets is indexed, no generated
        -- column, no trigger; the domains of the columns it sets are all it checks.
        -- The record claims the key (journal_request_key); no API call can have
        -- claimed it since the read above (they wait for its advisory lock).
        -- The explicit_reinforcement outcome is the record, counted on the node by
        -- the same UPDATE (docs/MAINTENANCE.md).
        WITH updated AS (
            UPDATE prme.nodes AS n SET
                reinforcement_boost = v_after.reinforcement_boost,
                confidence_base = v_after.confidence_base,
                last_reinforced_at = v_after.last_reinforced_at,
                updated_at = v_after.updated_at,
                evidence_refs = v_after.evidence_refs,
                version = v_after.version,
                last_checksum = v_entry.checksum,
                reinforcements = n.reinforcements + 1
            WHERE n.user_id = v_user_id AND n.id = reinforce.node_id AND n.version = v_node.version
            RETURNING n.reinforcements
        )
        INSERT INTO prme.journal
        SELECT v_entry.* FROM updated;
        EXIT WHEN FOUND;
        -- Another call changed the node since the read: start again from its new version.
    END LOOP;

    RETURN prme._node_view(v_after, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.reinforce(uuid, text, uuid, uuid) IS
'Confirms a memory of user_id (DESIGN.md section 3): boost +0.15 capped at 0.5, confidence +0.05 capped at 0.95, '
'never reduced; evidence_id appended to evidence_refs; journaled, and the journal record is its '
'explicit_reinforcement outcome and carries its key. With request_id, a retry of the same call returns the '
'current node with replayed = true and writes nothing; reuse for anything else raises PR409. PR404 for a '
'missing, foreign or archived node, or evidence of another owner or scope.';

-- >>> sql/postgres/160_journal_records.sql

CREATE OR REPLACE FUNCTION prme.journal_records(user_id text)
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
    -- One row per record; a node without records appears once with NULL record
    -- columns, a record without its node with NULL node columns (version, last_checksum).
    RETURN QUERY
    SELECT n.id, n.version::bigint, n.last_checksum::text, j.node_version::bigint, j.record_version, j.op,
        j.operation_id, j.request_id, j.evidence_id, j.record, j.checksum::text, j.prev_checksum::text
    FROM prme.nodes AS n
    LEFT JOIN prme.journal AS j ON j.user_id = n.user_id AND j.node_id = n.id
    WHERE n.user_id = v_user_id
    UNION ALL
    SELECT j.node_id, NULL, NULL, j.node_version::bigint, j.record_version, j.op, j.operation_id,
        j.request_id, j.evidence_id, j.record, j.checksum::text, j.prev_checksum::text
    FROM prme.journal AS j
    WHERE j.user_id = v_user_id
      AND NOT EXISTS (SELECT FROM prme.nodes AS n WHERE n.user_id = j.user_id AND n.id = j.node_id)
    ORDER BY 1, 4;
END;
$$;

COMMENT ON FUNCTION prme.journal_records(text) IS
'Every journal record of user_id with its node''s head (version, last_checksum), in chain order, for '
'verification outside the database. Nodes without records appear once with NULL record columns, records '
'without their node with NULL version and last_checksum.';

-- >>> sql/postgres/165_node_journal.sql

CREATE OR REPLACE FUNCTION prme.node_journal(user_id text, node_id uuid, max_count integer DEFAULT 1000)
RETURNS TABLE (
    id uuid,
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
    v_user_id text := prme._valid_user_id(node_journal.user_id);
BEGIN
    IF node_journal.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    IF node_journal.max_count IS NULL OR node_journal.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    -- The oldest max_count records: a chain verifies from its first record on.
    -- A memory whose records are all gone appears once with NULL record columns.
    RETURN QUERY
    SELECT n.id, n.version::bigint, n.last_checksum::text, j.node_version::bigint, j.record_version, j.op,
        j.operation_id, j.request_id, j.evidence_id, j.record, j.checksum::text, j.prev_checksum::text
    FROM prme.nodes AS n
    LEFT JOIN LATERAL (
        SELECT r.node_version, r.record_version, r.op, r.operation_id, r.request_id, r.evidence_id, r.record,
            r.checksum, r.prev_checksum
        FROM prme.journal AS r
        WHERE r.user_id = n.user_id AND r.node_id = n.id
        ORDER BY r.node_version
        LIMIT node_journal.max_count
    ) AS j ON TRUE
    WHERE n.user_id = v_user_id AND n.id = node_journal.node_id
    ORDER BY j.node_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
END;
$$;

COMMENT ON FUNCTION prme.node_journal(text, uuid, integer) IS
'The oldest max_count (1..10000) journal records of one memory of user_id with the memory''s head (version, '
'last_checksum), in chain order, for verification outside the database. PR404 for a missing or foreign memory.';

-- >>> sql/postgres/210_outcomes.sql

CREATE OR REPLACE FUNCTION prme.record_outcome(
    user_id text,
    node_id uuid,
    outcome text,
    evidence_id uuid DEFAULT NULL,
    profile_id text DEFAULT NULL,
    thread_id text DEFAULT NULL,
    notes text DEFAULT NULL,
    request_id uuid DEFAULT NULL
)
RETURNS prme.outcome_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(record_outcome.user_id);
    v_outcome text := prme._valid_outcome(record_outcome.outcome);
    v_profile_id text := prme._valid_ref('profile_id', record_outcome.profile_id);
    v_thread_id text := prme._valid_ref('thread_id', record_outcome.thread_id);
    v_notes text := prme._valid_notes(record_outcome.notes);
    v_node prme.nodes;
    v_row prme.outcomes;
BEGIN
    IF record_outcome.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;

    -- Replay check before any lock, as reinforce does: a plain read, no WAL.
    IF record_outcome.request_id IS NOT NULL THEN
        SELECT n.* INTO v_node
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id AND n.id = record_outcome.node_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
        END IF;
        v_row := prme._outcome_replay(
            v_user_id, v_node.namespace, record_outcome.request_id, record_outcome.node_id, v_outcome,
            record_outcome.evidence_id, v_profile_id, v_thread_id, v_notes
        );
        IF v_row.id IS NOT NULL THEN
            RETURN prme._outcome_view(v_row, TRUE);
        END IF;
    END IF;

    -- The key's advisory lock (prme._key_lock, which reinforce also takes) before the
    -- row lock, in reinforce's order: taken the other way round, this share lock and
    -- reinforce's UPDATE could each wait for the other.
    IF record_outcome.request_id IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(prme._key_lock(v_user_id, record_outcome.request_id));
    END IF;

    -- The outcome does not change the node's state, so a share lock is enough: it
    -- keeps the node from being archived (or otherwise mutated) until we commit.
    -- Adding to the totals on its row later waits only for another outcome's.
    SELECT n.* INTO v_node
    FROM prme.nodes AS n
    WHERE n.user_id = v_user_id AND n.id = record_outcome.node_id
    FOR KEY SHARE;
    IF NOT FOUND OR v_node.lifecycle_state = 'archived' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;

    IF record_outcome.evidence_id IS NOT NULL THEN
        PERFORM FROM prme.events AS e
        WHERE e.user_id = v_user_id AND e.id = record_outcome.evidence_id AND e.scope = v_node.scope;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'evidence not found';
        END IF;
    END IF;

    -- Claim the key before appending: share locks do not serialise calls, the key
    -- does. Its advisory lock, held since above, orders this call after any call that
    -- claimed the same key (a confirmation's key is its journal record: PR409). A
    -- conflict on the key row waits for the other call; if it committed, this is its
    -- replay (or PR409 when the key is bound to anything else).
    IF record_outcome.request_id IS NOT NULL THEN
        v_row := prme._outcome_replay(
            v_user_id, v_node.namespace, record_outcome.request_id, record_outcome.node_id, v_outcome,
            record_outcome.evidence_id, v_profile_id, v_thread_id, v_notes
        );
        IF v_row.id IS NOT NULL THEN
            RETURN prme._outcome_view(v_row, TRUE);
        END IF;
        INSERT INTO prme.request_keys (
            user_id, namespace, request_id, operation, node_id, evidence_id, node_version, created_at
        ) VALUES (
            v_user_id, v_node.namespace, record_outcome.request_id, 'record_outcome', record_outcome.node_id,
            record_outcome.evidence_id, v_node.version, now()
        )
        ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            v_row := prme._outcome_replay(
                v_user_id, v_node.namespace, record_outcome.request_id, record_outcome.node_id, v_outcome,
                record_outcome.evidence_id, v_profile_id, v_thread_id, v_notes
            );
            IF v_row.id IS NOT NULL THEN
                RETURN prme._outcome_view(v_row, TRUE);
            END IF;
            RAISE EXCEPTION USING
                ERRCODE = 'PR409',
                MESSAGE = 'request_id was already used for another request',
                DETAIL = 'an idempotency key is bound to one operation, node and evidence';
        END IF;
    END IF;

    v_row := prme._add_outcome(
        v_user_id, record_outcome.node_id, v_outcome, record_outcome.evidence_id, v_profile_id, v_thread_id,
        v_notes, record_outcome.request_id, 'record_outcome', v_node.version, now()
    );
    RETURN prme._outcome_view(v_row, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.record_outcome(text, uuid, text, uuid, text, text, text, uuid) IS
'Appends an outcome event (explicit_reinforcement, implicit_success, neutral_exposure or explicit_correction) to a '
'memory of user_id; the memory itself is not changed. With request_id, a retry with the same arguments returns '
'the stored outcome with replayed = true and writes nothing; reuse with anything else raises PR409. PR404 for a '
'missing, foreign or archived node, or evidence of another owner or scope; PR422 for invalid arguments.';

-- >>> sql/postgres/250_maintenance_report.sql

CREATE OR REPLACE FUNCTION prme.maintenance_report(user_id text, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (
    node_id uuid,
    recommendations text[],
    lifecycle_state text,
    stability text,
    suggested_stability text,
    confidence_base numeric,
    suggested_confidence numeric,
    next_review_at timestamptz,
    overdue_cycles integer,
    decayed_cycles integer,
    explicit_reinforcements bigint,
    implicit_successes bigint,
    explicit_corrections bigint
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Above jit_above_cost at a million memories, yet compiling the expressions costs
-- more than it saves (measured: seconds).
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(maintenance_report.user_id);
    v_as_of timestamptz := coalesce(prme._valid_timestamp('as_of', maintenance_report.as_of), now());
    -- The effective settings, read once: the query needs no join for them.
    v_low prme.maintenance_settings := prme._maintenance_setting(v_user_id, 'low');
    v_semi prme.maintenance_settings := prme._maintenance_setting(v_user_id, 'semi-stable');
    v_stable prme.maintenance_settings := prme._maintenance_setting(v_user_id, 'stable');
    v_low_seconds double precision := date_part('epoch', v_low.review_cadence);
    v_semi_seconds double precision := date_part('epoch', v_semi.review_cadence);
    v_stable_seconds double precision := date_part('epoch', v_stable.review_cadence);
    -- Decay per cycle in ten-thousandths (numeric(5, 4): exact), like the memory's
    -- confidence_base * 10000: decay is integer arithmetic.
    v_low_decay integer := (v_low.decay_per_cycle * 10000)::integer;
    v_semi_decay integer := (v_semi.decay_per_cycle * 10000)::integer;
    v_stable_decay integer := (v_stable.decay_per_cycle * 10000)::integer;
BEGIN
    RETURN QUERY
    WITH counted AS (
        SELECT
            n.id AS node_id,
            n.lifecycle_state,
            n.stability,
            n.confidence_base,
            n.next_review_at,
            coalesce(n.next_review_at <= v_as_of, false) AS due,
            -- Outcomes since the last review, up to as_of: the totals (outcome rows and
            -- confirmations) minus what the review settled, minus (rarely) what was
            -- recorded after as_of.
            greatest(n.recorded_reinforcements + n.reinforcements - n.reviewed_explicit_reinforcements
                - coalesce(l.later[1], 0), 0) AS explicit_reinforcements,
            greatest(n.implicit_successes - n.reviewed_implicit_successes - coalesce(l.later[2], 0), 0)
                AS implicit_successes,
            greatest(n.explicit_corrections - n.reviewed_explicit_corrections - coalesce(l.later[3], 0), 0)
                AS explicit_corrections,
            n.decay_anchor,
            n.decay_cycles,
            n.decay_profile
        FROM prme.nodes AS n
        -- Outcomes recorded after as_of are not part of the report. Only memories
        -- whose newest outcome or confirmation is later than as_of look them up (none
        -- when as_of is now): an index range scan each. Of the confirmations after
        -- as_of, only the counted ones (the newest n.reinforcements) are left out.
        CROSS JOIN LATERAL (
            SELECT CASE WHEN n.last_outcome_at > v_as_of OR (n.reinforcements > 0 AND n.last_reinforced_at > v_as_of)
                THEN (
                    SELECT ARRAY[
                        count(*) FILTER (WHERE o.outcome = 'explicit_reinforcement') + least(n.reinforcements, (
                            SELECT count(*) FROM prme.journal AS j
                            WHERE j.user_id = n.user_id AND j.node_id = n.id AND j.op = 'reinforce'
                              AND j.recorded_at > v_as_of
                        )),
                        count(*) FILTER (WHERE o.outcome = 'implicit_success'),
                        count(*) FILTER (WHERE o.outcome = 'explicit_correction')
                    ]
                    FROM prme.outcomes AS o
                    WHERE o.user_id = n.user_id AND o.node_id = n.id AND o.created_at > v_as_of
                      AND o.recorded_by <> 'reinforce'
                ) END AS later
        ) AS l
        WHERE n.user_id = v_user_id AND n.lifecycle_state IN ('active', 'contested')
          -- The first cut, on the totals: outcomes after as_of only lower the counts,
          -- so a memory left out here would be left out below too.
          AND (n.next_review_at <= v_as_of
               OR n.explicit_corrections > n.reviewed_explicit_corrections
               OR n.recorded_reinforcements + n.reinforcements >= n.reviewed_explicit_reinforcements + 2
               OR n.implicit_successes >= n.reviewed_implicit_successes + 5)
        -- A fence: each value above is computed once per memory.
        OFFSET 0
    ),

    moved AS (
        SELECT
            c.*,
            -- What the counts call for, as a code (prme._maintenance_moves, inlined).
            prme._maintenance_moves(
                c.stability, c.lifecycle_state, c.explicit_reinforcements, c.implicit_successes,
                c.explicit_corrections
            ) AS moves,
            -- Overdue cycles begun by as_of (due memories only).
            CASE WHEN c.due
                    THEN prme._cycles_due(c.next_review_at, v_as_of, CASE c.stability
                        WHEN 'low' THEN v_low_seconds WHEN 'semi-stable' THEN v_semi_seconds ELSE v_stable_seconds
                    END)
                ELSE 0
            END AS cycles_due,
            -- Cycles already decayed against the current schedule.
            CASE WHEN c.decay_anchor = c.next_review_at THEN c.decay_cycles ELSE 0 END AS cycles_done,
            -- The decay per cycle (ten-thousandths); 0 for memories that do not decay
            -- (permanent, or confidence already 0).
            CASE WHEN c.confidence_base > 0 AND c.decay_profile <> 'permanent' THEN CASE c.stability
                WHEN 'low' THEN v_low_decay WHEN 'semi-stable' THEN v_semi_decay ELSE v_stable_decay END
            ELSE 0 END AS decay_per_cycle
        FROM counted AS c
        WHERE c.due OR c.explicit_reinforcements >= 2 OR c.implicit_successes >= 5 OR c.explicit_corrections >= 1
        OFFSET 0
    )

    SELECT
        c.node_id,
        -- decay_confidence: due, with overdue cycles not yet decayed.
        prme._maintenance_recommendations(c.moves, c.due, c.cycles_due > c.cycles_done AND c.decay_per_cycle > 0),
        c.lifecycle_state::text,
        c.stability::text,
        prme._maintenance_suggested_stability(c.moves, c.stability),
        c.confidence_base::numeric,
        CASE WHEN c.cycles_due > c.cycles_done AND c.decay_per_cycle > 0
            -- greatest(confidence_base - cycles * decay, 0) in ten-thousandths: the same
            -- value and scale (4), or 0 once nothing is left. In bigint: a memory due
            -- centuries before as_of has millions of hourly cycles.
            THEN CASE WHEN (c.confidence_base * 10000)::integer >= (c.cycles_due - c.cycles_done)::bigint * c.decay_per_cycle
                THEN ((c.confidence_base * 10000)::integer - (c.cycles_due - c.cycles_done)::bigint * c.decay_per_cycle)
                    * 0.0001
                ELSE 0
            END
        END,
        c.next_review_at,
        c.cycles_due,
        c.cycles_done,
        c.explicit_reinforcements,
        c.implicit_successes,
        c.explicit_corrections
    FROM moved AS c
    -- Exactly the memories with at least one recommendation.
    WHERE c.due OR c.moves > 0;
END;
$$;

COMMENT ON FUNCTION prme.maintenance_report(text, timestamptz) IS
'Maintenance recommendations for the active and contested memories of user_id as of a time (default now): one row '
'per memory that needs any, with recommendations (in this order: decay_confidence, review_due, review_memory, '
'decrease_stability, increase_stability, flag_for_review, mark_contested), the suggested stability and confidence, '
'its schedule (overdue cycles begun, cycles already decayed) and the outcome counts since its last review. '
'Changes nothing; rows come in no particular order. See docs/MAINTENANCE.md.';

-- >>> sql/postgres/300_effective_decay.sql

CREATE OR REPLACE FUNCTION prme.effective_nodes(
    user_id text,
    as_of timestamptz DEFAULT now(),
    after_node_id uuid DEFAULT NULL,
    max_count integer DEFAULT 100
)
RETURNS TABLE (
    id uuid,
    namespace text,
    scope text,
    kind text,
    lifecycle_state text,
    decay_profile text,
    salience_base numeric,
    reinforcement_boost numeric,
    confidence_base numeric,
    decay_from timestamptz,
    age_days double precision,
    effective_salience double precision,
    effective_confidence double precision
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(effective_nodes.user_id);
    v_as_of timestamptz := prme._valid_timestamp('as_of', coalesce(effective_nodes.as_of, now()));
BEGIN
    IF effective_nodes.max_count IS NULL OR effective_nodes.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    -- Keyset pagination over the primary key, as prme.list_nodes.
    RETURN QUERY
    SELECT d.id, d.namespace::text, d.scope::text, d.kind::text, d.lifecycle_state::text, d.decay_profile::text,
        d.salience_base::numeric, d.reinforcement_boost::numeric, d.confidence_base::numeric, d.decay_from, d.age_days,
        prme._effective_salience(d.salience_base, d.reinforcement_boost, d.decay_profile, d.age_days),
        prme._effective_confidence(d.confidence_base, d.decay_profile, d.age_days)
    FROM (
        SELECT n.*, coalesce(n.last_reinforced_at, n.created_at) AS decay_from,
            prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of) AS age_days
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id
          AND (effective_nodes.after_node_id IS NULL OR n.id > effective_nodes.after_node_id)
        ORDER BY n.id
        LIMIT effective_nodes.max_count
    ) AS d
    ORDER BY d.id;
END;
$$;

COMMENT ON FUNCTION prme.effective_nodes(text, timestamptz, uuid, integer) IS
'Pages through the memories of user_id (every lifecycle state) in id order with their effective salience and '
'confidence at as_of (default now; NULL means now): virtual decay from last_reinforced_at, or created_at when '
'never confirmed. Nothing is written. Pass the last id as after_node_id; max_count is 1..10000.';

-- >>> sql/postgres/310_recall.sql

CREATE OR REPLACE FUNCTION prme.recall(
    user_id text,
    query text DEFAULT NULL,
    scopes text[] DEFAULT NULL,
    max_count integer DEFAULT 10,
    as_of timestamptz DEFAULT now()
)
RETURNS TABLE (
    rank integer,
    score double precision,
    relevance double precision,
    effective_salience double precision,
    effective_confidence double precision,
    id uuid,
    namespace text,
    scope text,
    kind text,
    content text,
    lifecycle_state text,
    decay_profile text,
    confidence_base numeric,
    salience_base numeric,
    reinforcement_boost numeric,
    last_reinforced_at timestamptz,
    created_at timestamptz,
    updated_at timestamptz,
    version bigint
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(recall.user_id);
    v_scopes text[] := prme._valid_scopes(recall.scopes);
    v_as_of timestamptz := prme._valid_timestamp('as_of', coalesce(recall.as_of, now()));
    v_lexemes text[];
    v_lexeme_count integer;
    v_query tsquery;
BEGIN
    IF recall.max_count IS NULL OR recall.max_count NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 1000';
    END IF;
    IF octet_length(recall.query) > 65536 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'query must be at most 65536 bytes',
            DETAIL = format('got %s bytes', octet_length(recall.query));
    END IF;

    IF recall.query IS NULL OR btrim(recall.query, E' \t\n\r\f\v') = '' THEN
        -- No query: every recallable memory of the owner matches; strength ranks alone.
        RETURN QUERY
        SELECT (row_number() OVER (ORDER BY r.score DESC, r.id))::integer, r.score, r.relevance,
            r.effective_salience, r.effective_confidence, r.id, r.namespace::text, r.scope::text, r.kind::text,
            r.content, r.lifecycle_state::text, r.decay_profile::text, r.confidence_base::numeric,
            r.salience_base::numeric, r.reinforcement_boost::numeric, r.last_reinforced_at, r.created_at,
            r.updated_at, r.version::bigint
        FROM (
            SELECT s.* FROM (
                SELECT d.*, d.relevance * (0.5 + 0.25 * d.effective_salience + 0.25 * d.effective_confidence) AS score
                FROM (
                    SELECT n.id, n.namespace, n.scope, n.kind, n.content, n.lifecycle_state, n.decay_profile,
                        n.confidence_base, n.salience_base, n.reinforcement_boost, n.last_reinforced_at,
                        n.created_at, n.updated_at, n.version, 1.0::double precision AS relevance,
                        prme._effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile,
                            prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                        ) AS effective_salience,
                        prme._effective_confidence(n.confidence_base, n.decay_profile,
                            prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                        ) AS effective_confidence
                    FROM prme.nodes AS n
                    WHERE n.user_id = v_user_id
                      AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                      AND (v_scopes IS NULL OR n.scope = ANY (v_scopes))
                    OFFSET 0  -- a level of its own: each effective value is computed once per row
                ) AS d
            ) AS s
            ORDER BY s.score DESC, s.id
            LIMIT recall.max_count
        ) AS r
        ORDER BY r.score DESC, r.id;
        RETURN;
    END IF;

    v_lexemes := prme._query_lexemes(v_user_id, recall.query);
    v_lexeme_count := cardinality(v_lexemes);
    IF v_lexeme_count = 0 THEN
        RETURN;  -- only stop words and punctuation: nothing can match
    END IF;
    v_query := prme._any_lexeme_query(v_lexemes);

    -- Same shape as above, plus the match and relevance: the memory's lexemes that
    -- are in the query, i.e. all of them minus the rest. The query's lexemes carry
    -- the owner's key, so the GIN index on search finds this owner's matches alone;
    -- the owner test stays outside the inner level, as a recheck (two owners whose
    -- keys collided would share postings), so the planner does not also scan the
    -- owner's rows in the primary key to intersect them.
    RETURN QUERY
    SELECT (row_number() OVER (ORDER BY r.score DESC, r.id))::integer, r.score, r.relevance,
        r.effective_salience, r.effective_confidence, r.id, r.namespace::text, r.scope::text, r.kind::text,
        r.content, r.lifecycle_state::text, r.decay_profile::text, r.confidence_base::numeric,
        r.salience_base::numeric, r.reinforcement_boost::numeric, r.last_reinforced_at, r.created_at,
        r.updated_at, r.version::bigint
    FROM (
        SELECT s.* FROM (
            SELECT d.*, d.relevance * (0.5 + 0.25 * d.effective_salience + 0.25 * d.effective_confidence) AS score
            FROM (
                SELECT n.user_id, n.id, n.namespace, n.scope, n.kind, n.content, n.lifecycle_state, n.decay_profile,
                    n.confidence_base, n.salience_base, n.reinforcement_boost, n.last_reinforced_at,
                    n.created_at, n.updated_at, n.version,
                    (length(n.search) - length(ts_delete(n.search, v_lexemes)))::double precision
                    / v_lexeme_count AS relevance,
                    prme._effective_salience(n.salience_base, n.reinforcement_boost, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                    ) AS effective_salience,
                    prme._effective_confidence(n.confidence_base, n.decay_profile,
                        prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of)
                    ) AS effective_confidence
                FROM prme.nodes AS n
                WHERE n.search @@ v_query
                  AND n.lifecycle_state NOT IN ('archived', 'deprecated')
                  AND (v_scopes IS NULL OR n.scope = ANY (v_scopes))
                OFFSET 0  -- a level of its own: each effective value is computed once per row
            ) AS d
            WHERE d.user_id = v_user_id
        ) AS s
        ORDER BY s.score DESC, s.id
        LIMIT recall.max_count
    ) AS r
    ORDER BY r.score DESC, r.id;
END;
$$;

COMMENT ON FUNCTION prme.recall(text, text, text[], integer, timestamptz) IS
'Full-text recall over the memories of user_id, best first: relevance (share of the query''s lexemes the memory '
'has) times 0.5 + 0.25 * effective_salience + 0.25 * effective_confidence at as_of (default now; NULL means now), '
'ties by id. A NULL or blank query ranks every memory by strength alone. scopes (NULL = all) filters; max_count is '
'1..1000; the query is at most 64 KiB with at most 1024 distinct lexemes. Archived and deprecated memories are '
'excluded. Nothing is written. See docs/RECALL.md.';
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (21, 'row_rules_on_types', '05c94d0ad0540a1847ce99ffc73b2b796b84daa40d63690d9c5f0012d6575a64');

-- prme-pg migration 0014_hot_path: a fresh confirmation (prme.reinforce) durably writes its node
-- row and one journal record, nothing else (docs/REINFORCE.md, "Hot path").
--   * prme.nodes.search is a plain column written once by add_node (content never changes), no
--     longer a generated column PostgreSQL recomputes on every UPDATE; nodes get fillfactor 90,
--     so a confirmation's UPDATE (no indexed column, no trigger) stays on its page (HOT).
--   * The idempotency key of a confirmation is its journal record: request_id with the new
--     key_namespace column and the unique index journal_request_key. Reinforce keys move out of
--     prme.request_keys (which keeps record_outcome's). A key used by one kind of call and
--     reused by another is still PR409: both take the key's advisory lock (prme._key_lock).
--   * The explicit_reinforcement outcome of a confirmation is its journal record, counted by
--     the new prme.nodes.reinforcements in the confirmation's UPDATE. The rows confirmations
--     wrote to prme.outcomes before are kept (recorded_by 'reinforce'); they move from
--     node_maintenance.explicit_reinforcements to nodes.reinforcements, and readers
--     (outcome_summary, node_outcomes, maintenance_report, maintenance_patch, mark_reviewed)
--     read confirmations from the node and its journal. reviewed_explicit_reinforcements
--     keeps counting both.
--   * The journal record's text is built by SQL-standard-body functions that PostgreSQL
--     inlines (_json_time, _node_state, _journal_record_v2, and the caps), not PL/pgSQL
--     calls with a SET clause each; the records are byte for byte the same.
--   * The node_maintenance mirror no longer copies confidence_base (the report reads it from
--     the node), so a confirmation fires no trigger; pending_moves, confidence_base and
--     confidence_ten_thousandths are dropped from prme.node_maintenance (the report computes
--     them from the node and its bookkeeping row). The journal's foreign key to prme.nodes is
--     dropped (a trigger on every record; verify_journal reports node_missing).
-- Locks: ACCESS EXCLUSIVE on prme.nodes, prme.journal and prme.node_maintenance (ALTER TABLE)
-- and ROW EXCLUSIVE on prme.request_keys until commit: every memory call waits meanwhile. It
-- writes each journal record that carries a request_id once (key_namespace), each memory with
-- confirmation outcomes and its bookkeeping row once, and builds one partial unique index.
-- Time, measured here (2 cores shared with other work, load average about 6, PostgreSQL 15,
-- server defaults): 49 s for 200,000 memories with 240,000 journal records, 40,000 of them
-- keyed confirmations with their key and outcome rows: about 4 minutes per million memories.
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0014_hot_path.sql (or prme-pg migrate).

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/040_nodes.sql: search written once, the confirmation counter, room for HOT

ALTER TABLE prme.nodes ALTER COLUMN search DROP EXPRESSION;
ALTER TABLE prme.nodes ADD COLUMN reinforcements bigint NOT NULL DEFAULT 0 CHECK (reinforcements >= 0);
ALTER TABLE prme.nodes SET (fillfactor = 90);

COMMENT ON COLUMN prme.nodes.search IS
'Derived: prme._owner_lexemes(user_id, content) as a tsvector, written once by add_node (content never changes). '
'Not part of journal states.';
COMMENT ON COLUMN prme.nodes.reinforcements IS
'Derived: confirmations applied by prme.reinforce that count as explicit_reinforcement outcomes (each is the '
'newest of the node''s journal records of op reinforce). Not part of journal states.';

-- >>> sql/postgres/060_journal.sql: the journal record carries the key

ALTER TABLE prme.journal ADD COLUMN key_namespace text;
ALTER TABLE prme.journal DROP CONSTRAINT journal_user_id_node_id_fkey;

-- Every keyed record takes the namespace its key row names (the node's), or, for a record whose
-- key row is missing, the namespace of its after state. The journal refuses updates; this one
-- fills a new column and changes no record.
ALTER TABLE prme.journal DISABLE TRIGGER journal_append_only;
UPDATE prme.journal AS j SET key_namespace = coalesce(
    (
        SELECT k.namespace FROM prme.request_keys AS k
        WHERE k.user_id = j.user_id AND k.node_id = j.node_id AND k.node_version = j.node_version
          AND k.operation = 'reinforce' AND k.request_id = j.request_id
    ),
    prme._parse_record(j.record) -> 'after' ->> 'namespace'
)
WHERE j.request_id IS NOT NULL;
ALTER TABLE prme.journal ENABLE TRIGGER journal_append_only;

ALTER TABLE prme.journal ADD CONSTRAINT journal_key_namespace_check
CHECK ((request_id IS NULL) = (key_namespace IS NULL));
COMMENT ON COLUMN prme.journal.key_namespace IS
'The node''s namespace when the record carries a request_id (its after.namespace), else null: the scope of the '
'idempotency key.';
CREATE UNIQUE INDEX journal_request_key ON prme.journal (user_id, key_namespace, request_id)
WHERE request_id IS NOT NULL;

-- >>> sql/postgres/070_request_keys.sql: confirmations' keys now live in their journal records

DELETE FROM prme.request_keys WHERE operation = 'reinforce';
COMMENT ON TABLE prme.request_keys IS
'Idempotency keys per (user_id, namespace) of calls that write no journal record (record_outcome): what each '
'request_id did and the journal record of the node state it saw. A confirmation''s key is its journal record.';

-- >>> sql/postgres/200_node_maintenance.sql: confirmations counted on the node; no mirror of confidence

ALTER TABLE prme.node_maintenance DROP CONSTRAINT node_maintenance_reviewed_explicit_reinforcements_check;
ALTER TABLE prme.node_maintenance ADD CONSTRAINT node_maintenance_reviewed_explicit_reinforcements_check
CHECK (reviewed_explicit_reinforcements >= 0);

CREATE TEMPORARY TABLE confirmations ON COMMIT DROP AS
SELECT o.user_id, o.node_id, count(*) AS n
FROM prme.outcomes AS o
WHERE o.recorded_by = 'reinforce'
GROUP BY o.user_id, o.node_id;

UPDATE prme.nodes AS n SET reinforcements = c.n
FROM confirmations AS c
WHERE n.user_id = c.user_id AND n.id = c.node_id;

UPDATE prme.node_maintenance AS k SET explicit_reinforcements = k.explicit_reinforcements - c.n
FROM confirmations AS c
WHERE k.user_id = c.user_id AND k.node_id = c.node_id;

DROP TRIGGER nodes_maintenance_mirror_update ON prme.nodes;
-- Only when a mirrored field really changes. A confirmation sets none of them, so
-- its UPDATE does not even queue this trigger.
CREATE TRIGGER nodes_maintenance_mirror_update
AFTER UPDATE OF stability, lifecycle_state, next_review_at, decay_profile ON prme.nodes
FOR EACH ROW
WHEN (
    (old.stability, old.lifecycle_state, old.next_review_at, old.decay_profile)
    IS DISTINCT FROM
    (new.stability, new.lifecycle_state, new.next_review_at, new.decay_profile)
)
EXECUTE FUNCTION prme._mirror_node();

ALTER TABLE prme.node_maintenance
DROP COLUMN pending_moves,
DROP COLUMN confidence_base,
DROP COLUMN confidence_ten_thousandths;

COMMENT ON TABLE prme.node_maintenance IS
'Derived, one row per memory: a mirror of its schedule fields (kept by triggers on prme.nodes), the running totals '
'of its outcome rows (confirmations are counted by prme.nodes.reinforcements), the totals its last review settled '
'(over both), and the overdue cycles decayed against its schedule. See docs/MAINTENANCE.md.';

-- >>> sql/postgres/040_nodes.sql

CREATE OR REPLACE FUNCTION prme._json_time(value timestamptz)
RETURNS text
LANGUAGE sql
STABLE
PARALLEL SAFE
-- UTC, always six fractional digits: independent of the session's TimeZone and DateStyle.
RETURN coalesce('"' || to_char(value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '"', 'null');

COMMENT ON FUNCTION prme._json_time(timestamptz) IS
'Internal: a timestamp as a journal JSON value, "YYYY-MM-DDTHH:MM:SS.ffffffZ" in UTC, or null.';


CREATE OR REPLACE FUNCTION prme._node_state(node prme.nodes)
RETURNS text
LANGUAGE sql
STABLE
PARALLEL SAFE
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

COMMENT ON FUNCTION prme._node_state(prme.nodes) IS
'Internal: the complete state of a node as RFC 8785 canonical JSON, as journal records embed it '
'(every column but derived ones).';


-- >>> sql/postgres/060_journal.sql

CREATE OR REPLACE FUNCTION prme._journal_record_v2(
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
LANGUAGE sql
STABLE
PARALLEL SAFE
-- Keys in RFC 8785 order (all ASCII, so code-unit order is byte order). SQL-standard
-- body, no SET clause: inlined (040_nodes.sql, _json_time).
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

COMMENT ON FUNCTION prme._journal_record_v2(text, text, uuid, uuid, text, uuid, uuid, text, text, text, timestamptz) IS
'Internal: the canonical text of a version 2 journal record. Pure, so other implementations '
'(the DuckDB port, the Python verifier) are tested byte for byte against it.';


CREATE OR REPLACE FUNCTION prme._journal_entry(
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
    v_entry.key_namespace := CASE WHEN request_id IS NOT NULL THEN after.namespace END;
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

    -- Records whose node row is gone: their chain may still verify, so only the
    -- missing row shows that a node was deleted. Reported at the newest record.
    RETURN QUERY
    SELECT j.node_id, max(j.node_version), 'node_missing'::text,
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


-- >>> sql/postgres/080_add_node.sql

CREATE OR REPLACE FUNCTION prme.add_node(
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

    -- The search vector is computed here, once: content never changes afterwards.
    INSERT INTO prme.nodes (
        id, user_id, namespace, scope, kind, content, confidence_base, salience_base, reinforcement_boost,
        last_reinforced_at, evidence_refs, stability, next_review_at, lifecycle_state, decay_profile,
        created_at, updated_at, version, last_checksum, search
    ) VALUES (
        v_node.id, v_node.user_id, v_node.namespace, v_node.scope, v_node.kind, v_node.content,
        v_node.confidence_base, v_node.salience_base, v_node.reinforcement_boost, v_node.last_reinforced_at,
        v_node.evidence_refs, v_node.stability, v_node.next_review_at, v_node.lifecycle_state,
        v_node.decay_profile, v_node.created_at, v_node.updated_at, v_node.version, v_node.last_checksum,
        array_to_tsvector(prme._owner_lexemes(v_node.user_id, v_node.content))
    )
    ON CONFLICT DO NOTHING;
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


-- >>> sql/postgres/110_reinforce.sql

CREATE OR REPLACE FUNCTION prme._reinforced_boost(boost numeric)
RETURNS numeric
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
-- +0.15 up to a cap of 0.5; a value already above the cap is kept, never reduced.
RETURN greatest(boost, least(boost + 0.15, 0.5));

COMMENT ON FUNCTION prme._reinforced_boost(numeric) IS
'Internal, policy additive_caps_v1: reinforcement_boost after one confirmation, greatest(b, least(b + 0.15, 0.5)).';


CREATE OR REPLACE FUNCTION prme._reinforced_confidence(confidence numeric)
RETURNS numeric
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
-- +0.05 up to a cap of 0.95; a value already above the cap is kept, never reduced.
RETURN greatest(confidence, least(confidence + 0.05, 0.95));

COMMENT ON FUNCTION prme._reinforced_confidence(numeric) IS
'Internal, policy additive_caps_v1: confidence_base after one confirmation, greatest(c, least(c + 0.05, 0.95)).';


CREATE OR REPLACE FUNCTION prme._key_lock(user_id text, namespace text, request_id uuid)
RETURNS bigint
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN hashtextextended(user_id || '/' || namespace || '/' || request_id::text, 0);

COMMENT ON FUNCTION prme._key_lock(text, text, uuid) IS
'Internal: the transaction advisory lock key of an idempotency key. The calls that claim a key in different '
'places (reinforce: its journal record; record_outcome: prme.request_keys) hold it while they check and claim, '
'so a key reused by another kind of call is PR409 even when both race. A hash collision only makes two '
'calls wait for each other.';


CREATE OR REPLACE FUNCTION prme._key_replays(
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
    v_journal record;
    v_key prme.request_keys;
BEGIN
    -- A confirmation's key is its journal record (index journal_request_key).
    SELECT j.op, j.node_id, j.evidence_id INTO v_journal
    FROM prme.journal AS j
    WHERE j.user_id = _key_replays.user_id
      AND j.key_namespace = _key_replays.namespace
      AND j.request_id = _key_replays.request_id;
    IF FOUND THEN
        IF _key_replays.operation = 'reinforce' AND v_journal.op = 'reinforce'
           AND v_journal.node_id = _key_replays.node_id
           AND v_journal.evidence_id IS NOT DISTINCT FROM _key_replays.evidence_id THEN
            RETURN TRUE;
        END IF;
    ELSE
        -- Any other call's key: record_outcome's.
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
    END IF;
    RAISE EXCEPTION USING
        ERRCODE = 'PR409',
        MESSAGE = 'request_id was already used for another request',
        DETAIL = 'an idempotency key is bound to one operation, node and evidence';
END;
$$;

COMMENT ON FUNCTION prme._key_replays(text, text, uuid, text, uuid, uuid) IS
'Internal (volatile on purpose: each call reads with a fresh snapshot, so it sees keys committed while the '
'caller waited for the key''s advisory lock): true when a committed key binds request_id to this same operation, node and '
'evidence (a replay); false when the key is unused; PR409 when it is bound to anything else. A key is a journal '
'record carrying request_id (reinforce) or a prme.request_keys row (record_outcome).';


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

    -- 2. Replay check before any row lock: plain reads, no WAL. The key's advisory
    -- lock (prme._key_lock: memory only, no WAL either) comes first, and every call
    -- that claims a key holds it until it commits, so the key seen here stays the key
    -- until this call commits: no re-check is needed once the row is locked.
    IF reinforce.request_id IS NOT NULL THEN
        SELECT n.namespace INTO v_node.namespace
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id AND n.id = reinforce.node_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
        END IF;
        PERFORM pg_advisory_xact_lock(prme._key_lock(v_user_id, v_node.namespace, reinforce.request_id));
        IF prme._key_replays(
            v_user_id, v_node.namespace, reinforce.request_id, 'reinforce', reinforce.node_id, reinforce.evidence_id
        ) THEN
            -- Read the node now: a replay returns the current node, and this new
            -- snapshot sees the update of the call that committed the key.
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
    -- 7. The explicit_reinforcement outcome is this confirmation's journal record,
    -- counted on the node by the same UPDATE (docs/MAINTENANCE.md).
    v_after.reinforcements := v_node.reinforcements + 1;

    -- 6. Journal record, chained to the node's previous record; it carries the key.
    v_entry := prme._journal_entry(
        'reinforce', 'additive_caps_v1', gen_random_uuid(), reinforce.request_id, reinforce.evidence_id,
        v_node, v_after
    );
    v_after.last_checksum := v_entry.checksum;

    -- No indexed column, no generated column, no trigger: a HOT update.
    UPDATE prme.nodes AS n SET
        reinforcement_boost = v_after.reinforcement_boost,
        confidence_base = v_after.confidence_base,
        last_reinforced_at = v_after.last_reinforced_at,
        updated_at = v_after.updated_at,
        evidence_refs = v_after.evidence_refs,
        version = v_after.version,
        last_checksum = v_after.last_checksum,
        reinforcements = v_after.reinforcements
    WHERE n.user_id = v_user_id AND n.id = reinforce.node_id;

    -- The record claims the key (journal_request_key). Every call that claims a key
    -- holds its advisory lock, so no API call can have claimed it since the check
    -- above: a plain INSERT, no speculative insertion (ON CONFLICT).
    INSERT INTO prme.journal SELECT v_entry.*;

    RETURN prme._node_view(v_after, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.reinforce(uuid, text, uuid, uuid) IS
'Confirms a memory of user_id (DESIGN.md section 3): boost +0.15 capped at 0.5, confidence +0.05 capped at 0.95, '
'never reduced; evidence_id appended to evidence_refs; journaled, and the journal record is its '
'explicit_reinforcement outcome and carries its key. With request_id, a retry of the same call returns the '
'current node with replayed = true and writes nothing; reuse for anything else raises PR409. PR404 for a '
'missing, foreign or archived node, or evidence of another owner or scope.';


-- >>> sql/postgres/200_node_maintenance.sql

CREATE OR REPLACE FUNCTION prme._mirror_node()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- A new memory has no outcomes yet. An existing one keeps its totals.
    INSERT INTO prme.node_maintenance AS k (
        user_id, node_id, stability, lifecycle_state, next_review_at, decay_profile, updated_at, review_due_at
    ) VALUES (
        NEW.user_id, NEW.id, NEW.stability, NEW.lifecycle_state, NEW.next_review_at, NEW.decay_profile,
        NEW.updated_at, prme._report_due_at(NEW.lifecycle_state, NEW.next_review_at)
    )
    ON CONFLICT (user_id, node_id) DO UPDATE SET
        stability = excluded.stability,
        lifecycle_state = excluded.lifecycle_state,
        next_review_at = excluded.next_review_at,
        decay_profile = excluded.decay_profile,
        updated_at = excluded.updated_at,
        review_due_at = excluded.review_due_at;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION prme._mirror_node() IS
'Internal trigger on prme.nodes: copies stability, lifecycle_state, next_review_at and decay_profile into the '
'memory''s prme.node_maintenance row (creating it for a new memory), with review_due_at.';


CREATE OR REPLACE FUNCTION prme._rebuild_node_maintenance(user_id text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(_rebuild_node_maintenance.user_id);
    v_rows bigint;
BEGIN
    -- Set-based: the mirror from prme.nodes and one aggregate over the owner's
    -- outcome rows (not the rows confirmations wrote before 0014: those are counted
    -- by prme.nodes.reinforcements), merged into the rows; review and decay
    -- bookkeeping is kept.
    WITH totals AS (
        SELECT
            o.node_id,
            count(*) FILTER (WHERE o.outcome = 'explicit_reinforcement') AS er,
            count(*) FILTER (WHERE o.outcome = 'implicit_success') AS isx,
            count(*) FILTER (WHERE o.outcome = 'neutral_exposure') AS ne,
            count(*) FILTER (WHERE o.outcome = 'explicit_correction') AS ec,
            max(o.created_at) AS last_at
        FROM prme.outcomes AS o
        WHERE o.user_id = v_user_id AND o.recorded_by <> 'reinforce'
        GROUP BY o.node_id
    )

    INSERT INTO prme.node_maintenance AS k (
        user_id, node_id, stability, lifecycle_state, next_review_at, decay_profile,
        explicit_reinforcements, implicit_successes, neutral_exposures, explicit_corrections, last_outcome_at,
        updated_at, review_due_at
    )
    SELECT
        n.user_id, n.id, n.stability, n.lifecycle_state, n.next_review_at, n.decay_profile,
        coalesce(t.er, 0), coalesce(t.isx, 0), coalesce(t.ne, 0), coalesce(t.ec, 0), t.last_at, now(),
        prme._report_due_at(n.lifecycle_state, n.next_review_at)
    FROM prme.nodes AS n
    LEFT JOIN totals AS t ON t.node_id = n.id
    WHERE n.user_id = v_user_id
    ON CONFLICT (user_id, node_id) DO UPDATE SET
        stability = excluded.stability,
        lifecycle_state = excluded.lifecycle_state,
        next_review_at = excluded.next_review_at,
        decay_profile = excluded.decay_profile,
        explicit_reinforcements = excluded.explicit_reinforcements,
        implicit_successes = excluded.implicit_successes,
        neutral_exposures = excluded.neutral_exposures,
        explicit_corrections = excluded.explicit_corrections,
        last_outcome_at = excluded.last_outcome_at,
        updated_at = excluded.updated_at,
        review_due_at = excluded.review_due_at
    WHERE (k.stability, k.lifecycle_state, k.next_review_at, k.decay_profile,
           k.explicit_reinforcements, k.implicit_successes, k.neutral_exposures, k.explicit_corrections,
           k.last_outcome_at, k.review_due_at)
          IS DISTINCT FROM
          (excluded.stability, excluded.lifecycle_state, excluded.next_review_at, excluded.decay_profile,
           excluded.explicit_reinforcements, excluded.implicit_successes,
           excluded.neutral_exposures, excluded.explicit_corrections, excluded.last_outcome_at,
           excluded.review_due_at);
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END;
$$;

COMMENT ON FUNCTION prme._rebuild_node_maintenance(text) IS
'Internal: recomputes the mirror and the running totals of outcome rows (review_due_at with them) of one '
'owner''s memories from prme.nodes and prme.outcomes, set-based (after a bulk load with triggers off, or to '
'repair), keeping review and decay bookkeeping. Returns the number of rows it wrote (0 when everything was '
'right). Run it while the owner''s memories are not being changed.';


-- >>> sql/postgres/210_outcomes.sql

CREATE OR REPLACE FUNCTION prme._add_outcome(
    user_id text,
    node_id uuid,
    outcome text,
    evidence_id uuid,
    profile_id text,
    thread_id text,
    notes text,
    request_id uuid,
    recorded_by text,
    node_version bigint,
    created_at timestamptz
)
RETURNS prme.outcomes
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_row prme.outcomes;
BEGIN
    v_row.user_id := _add_outcome.user_id;
    v_row.id := gen_random_uuid();
    v_row.node_id := _add_outcome.node_id;
    v_row.outcome := _add_outcome.outcome;
    v_row.weight := prme._outcome_weight(_add_outcome.outcome);
    v_row.evidence_id := _add_outcome.evidence_id;
    v_row.profile_id := _add_outcome.profile_id;
    v_row.thread_id := _add_outcome.thread_id;
    v_row.notes := _add_outcome.notes;
    v_row.request_id := _add_outcome.request_id;
    v_row.recorded_by := _add_outcome.recorded_by;
    v_row.node_version := _add_outcome.node_version;
    v_row.created_at := _add_outcome.created_at;
    INSERT INTO prme.outcomes SELECT v_row.*;

    UPDATE prme.node_maintenance AS k SET
        explicit_reinforcements = k.explicit_reinforcements + (v_row.outcome = 'explicit_reinforcement')::integer,
        implicit_successes = k.implicit_successes + (v_row.outcome = 'implicit_success')::integer,
        neutral_exposures = k.neutral_exposures + (v_row.outcome = 'neutral_exposure')::integer,
        explicit_corrections = k.explicit_corrections + (v_row.outcome = 'explicit_correction')::integer,
        last_outcome_at = greatest(k.last_outcome_at, v_row.created_at),
        updated_at = v_row.created_at
    WHERE k.user_id = v_row.user_id AND k.node_id = v_row.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'prme.node_maintenance has no row for node %', v_row.node_id
            USING HINT = 'the nodes_maintenance_mirror trigger keeps one per node; rebuild with prme._rebuild_node_maintenance';
    END IF;
    RETURN v_row;
END;
$$;

COMMENT ON FUNCTION prme._add_outcome(text, uuid, text, uuid, text, text, text, uuid, text, bigint, timestamptz) IS
'Internal: appends one outcome event and adds it to the node''s running totals in prme.node_maintenance. '
'The caller has validated the arguments and holds a lock on the node.';


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
    -- reinforce's FOR UPDATE could each wait for the other.
    IF record_outcome.request_id IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(prme._key_lock(v_user_id, v_node.namespace, record_outcome.request_id));
    END IF;

    -- The outcome does not change the node, so a share lock is enough: it keeps
    -- the node from being archived (or otherwise mutated) until we commit.
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


CREATE OR REPLACE FUNCTION prme.outcome_summary(user_id text, node_id uuid)
RETURNS TABLE (
    explicit_reinforcements bigint,
    implicit_successes bigint,
    neutral_exposures bigint,
    explicit_corrections bigint,
    outcomes bigint,
    score numeric,
    suggested_stability text,
    last_outcome_at timestamptz
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(outcome_summary.user_id);
    v_node prme.nodes;
    v_summary prme.node_maintenance;
BEGIN
    IF outcome_summary.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    SELECT n.* INTO v_node FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = outcome_summary.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
    SELECT s.* INTO v_summary
    FROM prme.node_maintenance AS s
    WHERE s.user_id = v_user_id AND s.node_id = outcome_summary.node_id;

    -- Confirmations are counted on the node, outcome rows in its bookkeeping row.
    explicit_reinforcements := coalesce(v_summary.explicit_reinforcements, 0) + v_node.reinforcements;
    implicit_successes := coalesce(v_summary.implicit_successes, 0);
    neutral_exposures := coalesce(v_summary.neutral_exposures, 0);
    explicit_corrections := coalesce(v_summary.explicit_corrections, 0);
    outcomes := explicit_reinforcements + implicit_successes + neutral_exposures + explicit_corrections;
    score := explicit_reinforcements * 1.0 + implicit_successes * 0.2 + neutral_exposures * 0
        - explicit_corrections * 1.0;
    suggested_stability := prme._suggested_stability(
        explicit_reinforcements, implicit_successes, neutral_exposures, explicit_corrections
    );
    -- The newest confirmation is a counted one (the counted ones are the newest).
    last_outcome_at := greatest(
        v_summary.last_outcome_at, CASE WHEN v_node.reinforcements > 0 THEN v_node.last_reinforced_at END
    );
    RETURN NEXT;
END;
$$;

COMMENT ON FUNCTION prme.outcome_summary(text, uuid) IS
'The outcome summary of a memory of user_id over all its outcomes: counts per outcome, score (sum of weights) and '
'suggested stability (low if any correction or score < 0; stable only from at least 2 explicit reinforcements; '
'otherwise semi-stable). PR404 when the node is missing or foreign.';


-- >>> sql/postgres/215_node_outcomes.sql

CREATE OR REPLACE FUNCTION prme.node_outcomes(user_id text, node_id uuid, max_count integer DEFAULT 100)
RETURNS SETOF prme.outcome_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(node_outcomes.user_id);
    v_reinforcements bigint;
BEGIN
    IF node_outcomes.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    IF node_outcomes.max_count IS NULL OR node_outcomes.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    SELECT n.reinforcements INTO v_reinforcements
    FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = node_outcomes.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
    RETURN QUERY
    SELECT u.*
    FROM (
        -- Backwards along the index (user_id, node_id, created_at).
        SELECT (prme._outcome_view(o, FALSE)).*
        FROM prme.outcomes AS o
        WHERE o.user_id = v_user_id AND o.node_id = node_outcomes.node_id AND o.recorded_by <> 'reinforce'
        UNION ALL
        -- Backwards along the journal's primary key.
        SELECT
            coalesce(x.id, c.operation_id), c.user_id, c.node_id, 'explicit_reinforcement'::text, 1.0::numeric(3, 2),
            c.evidence_id, NULL::text, NULL::text, NULL::text, c.request_id, 'reinforce'::text, c.node_version,
            c.recorded_at, FALSE
        FROM (
            SELECT j.user_id, j.node_id, j.node_version, j.operation_id, j.evidence_id, j.request_id, j.recorded_at
            FROM prme.journal AS j
            WHERE j.user_id = v_user_id AND j.node_id = node_outcomes.node_id AND j.op = 'reinforce'
            ORDER BY j.node_version DESC
            LIMIT least(v_reinforcements, node_outcomes.max_count)
        ) AS c
        LEFT JOIN prme.outcomes AS x
            ON x.user_id = c.user_id AND x.node_id = c.node_id AND x.recorded_by = 'reinforce'
            AND x.node_version = c.node_version
    ) AS u
    ORDER BY u.created_at DESC, u.id DESC
    LIMIT node_outcomes.max_count;
END;
$$;

COMMENT ON FUNCTION prme.node_outcomes(text, uuid, integer) IS
'The outcome events of one memory of user_id (any lifecycle state), newest first, at most max_count (1..10000). '
'PR404 for a missing or foreign memory.';


-- >>> sql/postgres/240_reviews_and_decay.sql

CREATE OR REPLACE FUNCTION prme._settle_outcomes(
    user_id text,
    node_id uuid,
    explicit_reinforcements bigint,
    implicit_successes bigint,
    neutral_exposures bigint,
    explicit_corrections bigint,
    reviewed_at timestamptz
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- Counts only grow (outcomes are append-only), so greatest() makes settling
    -- idempotent and order-independent.
    UPDATE prme.node_maintenance AS k SET
        reviewed_explicit_reinforcements
        = greatest(k.reviewed_explicit_reinforcements, _settle_outcomes.explicit_reinforcements),
        reviewed_implicit_successes = greatest(k.reviewed_implicit_successes, _settle_outcomes.implicit_successes),
        reviewed_neutral_exposures = greatest(k.reviewed_neutral_exposures, _settle_outcomes.neutral_exposures),
        reviewed_explicit_corrections
        = greatest(k.reviewed_explicit_corrections, _settle_outcomes.explicit_corrections),
        reviewed_at = _settle_outcomes.reviewed_at,
        updated_at = _settle_outcomes.reviewed_at
    WHERE k.user_id = _settle_outcomes.user_id AND k.node_id = _settle_outcomes.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'prme.node_maintenance has no row for node %', _settle_outcomes.node_id
            USING HINT = 'the nodes_maintenance_mirror trigger keeps one per node; rebuild with prme._rebuild_node_maintenance';
    END IF;
END;
$$;

COMMENT ON FUNCTION prme._settle_outcomes(text, uuid, bigint, bigint, bigint, bigint, timestamptz) IS
'Internal: records that a review of the memory saw these cumulative outcome counts (explicit reinforcements: '
'confirmations and outcome rows together); the report then counts only outcomes beyond them. Idempotent '
'(counts are raised, never lowered).';


CREATE OR REPLACE FUNCTION prme.mark_reviewed(user_id text, node_id uuid, next_review_at timestamptz DEFAULT NULL)
RETURNS prme.node_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(mark_reviewed.user_id);
    v_next timestamptz := prme._valid_timestamp('next_review_at', mark_reviewed.next_review_at);
    v_node prme.nodes;
    v_after prme.nodes;
    v_entry prme.journal;
    v_summary prme.node_maintenance;
    v_now timestamptz := now();
BEGIN
    IF mark_reviewed.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    IF v_next <= v_now THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'next_review_at must be in the future',
            DETAIL = format('got %s', v_next);
    END IF;

    SELECT n.* INTO v_node
    FROM prme.nodes AS n
    WHERE n.user_id = v_user_id AND n.id = mark_reviewed.node_id
    FOR UPDATE;
    IF NOT FOUND OR v_node.lifecycle_state = 'archived' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;

    v_after := v_node;
    v_after.next_review_at := coalesce(
        v_next, prme._plus_cadence(v_now, (prme._maintenance_setting(v_user_id, v_node.stability)).review_cadence)
    );
    v_after.updated_at := v_now;
    v_after.version := v_node.version + 1;
    v_entry := prme._journal_entry('review', 'maintenance_v1', gen_random_uuid(), NULL, NULL, v_node, v_after);
    v_after.last_checksum := v_entry.checksum;

    UPDATE prme.nodes AS n SET
        next_review_at = v_after.next_review_at,
        updated_at = v_after.updated_at,
        version = v_after.version,
        last_checksum = v_after.last_checksum
    WHERE n.user_id = v_user_id AND n.id = mark_reviewed.node_id;
    INSERT INTO prme.journal SELECT v_entry.*;

    -- The review covers every outcome recorded so far (recorders hold a share lock
    -- on the node, so all of them have committed by the time we hold ours), and
    -- every confirmation (counted on the node row we hold).
    SELECT s.* INTO v_summary
    FROM prme.node_maintenance AS s
    WHERE s.user_id = v_user_id AND s.node_id = mark_reviewed.node_id;
    PERFORM prme._settle_outcomes(
        v_user_id, mark_reviewed.node_id, coalesce(v_summary.explicit_reinforcements, 0) + v_node.reinforcements,
        coalesce(v_summary.implicit_successes, 0), coalesce(v_summary.neutral_exposures, 0),
        coalesce(v_summary.explicit_corrections, 0), v_now
    );

    RETURN prme._node_view(v_after, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.mark_reviewed(text, uuid, timestamptz) IS
'Records that the owner reviewed a memory of user_id: next_review_at becomes the given future time, else now plus '
'the review cadence of its stability (this resets decay), and every outcome so far counts as seen by the review. '
'Journaled as op review. PR404 for a missing, foreign or archived node.';


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
    -- confidence_ten_thousandths: decay is integer arithmetic.
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
            (n.confidence_base * 10000)::integer AS confidence_ten_thousandths,
            n.next_review_at,
            coalesce(n.next_review_at <= v_as_of, false) AS due,
            -- Outcomes since the last review, up to as_of: the totals (outcome rows and
            -- confirmations) minus what the review settled, minus (rarely) what was
            -- recorded after as_of.
            greatest(k.explicit_reinforcements + n.reinforcements - k.reviewed_explicit_reinforcements
                - coalesce(l.later[1], 0), 0) AS er,
            greatest(k.implicit_successes - k.reviewed_implicit_successes - coalesce(l.later[2], 0), 0) AS isx,
            greatest(k.explicit_corrections - k.reviewed_explicit_corrections - coalesce(l.later[3], 0), 0) AS ec,
            k.decay_anchor,
            k.decay_cycles,
            n.decay_profile
        FROM prme.nodes AS n
        INNER JOIN prme.node_maintenance AS k ON k.user_id = n.user_id AND k.node_id = n.id
        -- Outcomes recorded after as_of are not part of the report. Only memories
        -- whose newest outcome or confirmation is later than as_of look them up (none
        -- when as_of is now): an index range scan each. Of the confirmations after
        -- as_of, only the counted ones (the newest n.reinforcements) are left out.
        CROSS JOIN LATERAL (
            SELECT CASE WHEN k.last_outcome_at > v_as_of OR (n.reinforcements > 0 AND n.last_reinforced_at > v_as_of)
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
        -- A fence: each value above is computed once per memory.
        OFFSET 0
    ),

    moved AS (
        SELECT
            c.*,
            -- What the counts call for, as a code (prme._maintenance_moves, inlined).
            prme._maintenance_moves(c.stability, c.lifecycle_state, c.er, c.isx, c.ec) AS moves,
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
            CASE WHEN c.confidence_ten_thousandths > 0 AND c.decay_profile <> 'permanent' THEN CASE c.stability
                WHEN 'low' THEN v_low_decay WHEN 'semi-stable' THEN v_semi_decay ELSE v_stable_decay END
            ELSE 0 END AS decay_per_cycle
        FROM counted AS c
        WHERE c.due OR c.er >= 2 OR c.isx >= 5 OR c.ec >= 1
        OFFSET 0
    )

    SELECT
        c.node_id,
        -- Constant arrays, chosen by the schedule and the code: nothing is built per row.
        CASE
            WHEN NOT c.due THEN CASE c.moves
                WHEN 1 THEN '{review_memory}'::text[]
                WHEN 2 THEN '{review_memory,decrease_stability}'
                WHEN 3 THEN '{review_memory,mark_contested}'
                WHEN 4 THEN '{review_memory,decrease_stability,mark_contested}'
                WHEN 5 THEN '{increase_stability}'
                ELSE '{flag_for_review}'
            END
            -- decay_confidence: due, with overdue cycles not yet decayed.
            WHEN c.cycles_due > c.cycles_done AND c.decay_per_cycle > 0 THEN CASE c.moves
                WHEN 0 THEN '{decay_confidence,review_due}'::text[]
                WHEN 1 THEN '{decay_confidence,review_due,review_memory}'
                WHEN 2 THEN '{decay_confidence,review_due,review_memory,decrease_stability}'
                WHEN 3 THEN '{decay_confidence,review_due,review_memory,mark_contested}'
                WHEN 4 THEN '{decay_confidence,review_due,review_memory,decrease_stability,mark_contested}'
                WHEN 5 THEN '{decay_confidence,review_due,increase_stability}'
                ELSE '{decay_confidence,review_due,flag_for_review}'
            END
            ELSE CASE c.moves
                WHEN 0 THEN '{review_due}'::text[]
                WHEN 1 THEN '{review_due,review_memory}'
                WHEN 2 THEN '{review_due,review_memory,decrease_stability}'
                WHEN 3 THEN '{review_due,review_memory,mark_contested}'
                WHEN 4 THEN '{review_due,review_memory,decrease_stability,mark_contested}'
                WHEN 5 THEN '{review_due,increase_stability}'
                ELSE '{review_due,flag_for_review}'
            END
        END,
        c.lifecycle_state,
        c.stability,
        -- Decreases go one step down, increases one step up, a flag at most to semi-stable.
        CASE c.moves
            WHEN 0 THEN NULL
            WHEN 5 THEN CASE c.stability WHEN 'low' THEN 'semi-stable' ELSE 'stable' END
            WHEN 6 THEN 'semi-stable'
            WHEN 2 THEN CASE c.stability WHEN 'stable' THEN 'semi-stable' ELSE 'low' END
            WHEN 4 THEN CASE c.stability WHEN 'stable' THEN 'semi-stable' ELSE 'low' END
        END,
        c.confidence_base::numeric,
        CASE WHEN c.cycles_due > c.cycles_done AND c.decay_per_cycle > 0
            -- greatest(confidence_base - cycles * decay, 0) in ten-thousandths: the same
            -- value and scale (4), or 0 once nothing is left. In bigint: a memory due
            -- centuries before as_of has millions of hourly cycles.
            THEN CASE WHEN c.confidence_ten_thousandths >= (c.cycles_due - c.cycles_done)::bigint * c.decay_per_cycle
                THEN (c.confidence_ten_thousandths - (c.cycles_due - c.cycles_done)::bigint * c.decay_per_cycle)
                    * 0.0001
                ELSE 0
            END
        END,
        c.next_review_at,
        c.cycles_due,
        c.cycles_done,
        c.er,
        c.isx,
        c.ec
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


REVOKE ALL ON FUNCTION prme._key_lock(text, text, uuid) FROM public;
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (14, 'hot_path', '8eb6fa2cba9324d89705ad757b6cae525482661dd880634db45097d85538b596');

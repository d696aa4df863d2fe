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
-- committed and rejected are terminal. Every state change has an event, written
-- in the same transaction, with a per-operation sequence (operation_seq, 1, 2,
-- 3, ...) and a position in the owner's stream (seq), and notifies channel
-- prme_operations (payload 'ready': claimable work; 'events': anything else;
-- submits throttled, see prme._notify_ready below). The first event, accepted,
-- is kept in the operation row itself (accepted_seq; operation_seq 1, detail {}):
-- a submit writes one row, not two. Every later event is a row of
-- prme.operation_events. prme.operation_events() reads both as one stream.
--
-- seq is (top-level transaction id << 20) + n, n counting the events written
-- within that transaction. Sequences drawn from a SEQUENCE can commit out of
-- order, so a reader resuming "after seq S" could miss an event that commits
-- later with a smaller number. Tying seq to the transaction id closes that gap:
-- prme.operation_events shows only events of transactions older than the
-- reader's snapshot xmin (every one of them has finished), and any transaction
-- that finishes later has a larger id, hence larger seqs. See docs/LEDGER.md.
-- =============================================================================

-- The table checks what the functions rely on: the state machine's consistency
-- (state, blocked_by, result, error, counters) and the shape of what the executor
-- reads. Operation ids are ASCII and compared byte by byte (COLLATE "C"): the key's
-- comparisons cost what uuid's did, and sort the same in every database.
-- operation_id, kind and payload_hash, which prme.submit_operation checks
-- itself before it writes a row, are not checked a second time here: their regular
-- expressions would cost about a tenth of a submit (docs/LEDGER.md, "Performance").
CREATE TABLE prme.operations (
    user_id text NOT NULL,
    operation_id text COLLATE "C" NOT NULL,
    schema_version integer NOT NULL CHECK (schema_version = 2),
    kind text NOT NULL,
    dependencies text[] COLLATE "C" NOT NULL DEFAULT '{}' CHECK (array_position(dependencies, NULL) IS NULL),
    payload_hash text NOT NULL,
    payload jsonb NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    state text NOT NULL DEFAULT 'accepted'
    CHECK (state IN ('accepted', 'blocked', 'processing', 'committed', 'rejected')),
    blocked_by text[] COLLATE "C" NOT NULL DEFAULT '{}',
    result jsonb,
    error jsonb,
    attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL,
    worker text,
    last_event_seq integer NOT NULL DEFAULT 0 CHECK (last_event_seq >= 0),
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    accepted_seq bigint CHECK (accepted_seq > 0),
    PRIMARY KEY (user_id, operation_id),
    CHECK ((state = 'blocked') = (cardinality(blocked_by) > 0)),
    CHECK ((state = 'committed') = (result IS NOT NULL)),
    CHECK (state <> 'rejected' OR error IS NOT NULL)
);

COMMENT ON TABLE prme.operations IS
'The operations ledger: writes accepted by prme.submit_operation and applied exactly once by '
'prme.run_operations. Keyed by the caller''s operation_id within its owner.';
COMMENT ON COLUMN prme.operations.payload_hash IS
'The sha256 hex of the RFC 8785 canonical form of payload that the client declared; the executor recomputes it '
'before applying the operation and rejects a mismatch (payload_hash_mismatch). Proven only once committed.';
COMMENT ON COLUMN prme.operations.dependencies IS
'The operations this one waits for, in the order the caller listed them (each once).';
COMMENT ON COLUMN prme.operations.blocked_by IS
'While blocked: the dependencies that have not committed yet (submitted or not), sorted.';
COMMENT ON COLUMN prme.operations.next_attempt_at IS
'The executor claims an accepted or processing operation from this time on (retries back off), and looks '
'again at a blocked one at this time (its dependency wait, docs/LEDGER.md).';
COMMENT ON COLUMN prme.operations.last_event_seq IS
'operation_seq of the newest event of this operation (events are numbered under the row lock).';
COMMENT ON COLUMN prme.operations.accepted_seq IS
'Stream position (seq) of the operation''s first event, accepted (operation_seq 1, detail {}), which lives in '
'this row rather than in prme.operation_events. NULL when that event is a row of prme.operation_events.';

-- The executor's queue: what can be claimed, oldest first (blocked operations come
-- up when their dependency wait is over).
CREATE INDEX operations_ready ON prme.operations (next_attempt_at)
WHERE state IN ('accepted', 'processing', 'blocked');

-- Dependents to release or reject when an operation finishes.
CREATE INDEX operations_blocked ON prme.operations (user_id)
WHERE state = 'blocked';

-- The accepted events in stream order (prme.operation_events merges them with
-- the table's events); unique like the table's key (user_id, seq).
CREATE UNIQUE INDEX operations_accepted ON prme.operations (user_id, accepted_seq)
WHERE accepted_seq IS NOT NULL;

CREATE TABLE prme.operation_events (
    user_id text NOT NULL,
    seq bigint NOT NULL CHECK (seq > 0),
    operation_id text COLLATE "C" NOT NULL,
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

-- The operation kinds, written once: prme.submit_operation accepts these and the
-- executor applies these (440_run_operations.sql); the Python copies are tested
-- against this list (tests/test_ledger.py).
CREATE FUNCTION prme._operation_kinds()
RETURNS text[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    -- No SET search_path (it names no object): a function with one is never inlined,
    -- and inlined this list is a constant in every caller's plan.
    SELECT ARRAY[
        'add_node', 'add_event', 'reinforce', 'archive_node', 'record_outcome', 'link_correction', 'add_memory'
    ];
$$;

COMMENT ON FUNCTION prme._operation_kinds() IS
'Internal: the operation kinds the ledger accepts and its executor applies (docs/LEDGER.md).';

-- What operation_events returns.
CREATE TYPE prme.operation_event AS (
    seq bigint,
    operation_id text,
    operation_seq integer,
    state text,
    detail jsonb,
    created_at timestamptz
);

COMMENT ON TYPE prme.operation_event IS
'One event of an operation as prme.operation_events returns it.';

-- What submit_operation and get_receipt return.
CREATE TYPE prme.operation_receipt AS (
    operation_id text,
    kind text,
    payload_hash text,
    dependencies text[],  -- noqa: LT01
    state text,
    blocked_by text[],  -- noqa: LT01
    result jsonb,
    error jsonb,
    attempts integer,
    created_at timestamptz,
    updated_at timestamptz,
    created boolean,
    progress_seq integer
);

COMMENT ON TYPE prme.operation_receipt IS
'The receipt of an operation: its identity, state, what blocks it, its result or error, attempts, '
'created (true only for the call that accepted it) and progress_seq (operation_seq of its newest event).';

CREATE FUNCTION prme._operation_receipt(op prme.operations, created boolean)
RETURNS prme.operation_receipt
LANGUAGE plpgsql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN ROW(
        op.operation_id, op.kind, op.payload_hash, op.dependencies, op.state, op.blocked_by,
        op.result, op.error, op.attempts, op.created_at, op.updated_at, created, op.last_event_seq
    )::prme.operation_receipt;
END;
$$;

COMMENT ON FUNCTION prme._operation_receipt(prme.operations, boolean) IS
'Internal: the receipt of an operation row.';

CREATE FUNCTION prme._next_event_seq()
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_xid bigint := pg_current_xact_id()::text::bigint;
    v_counter text := current_setting('prme.event_seq_counter', TRUE);
    v_n integer;
BEGIN
    -- n counts this transaction's events in a transaction-local setting "xid:n"
    -- (no lookup, no row): set_config(..., TRUE) ends with the transaction and is
    -- undone with a rolled-back subtransaction, whose events are undone too.
    -- Anything else found there (another transaction's value, garbage) starts at 0;
    -- a session that forges it only makes its own inserts collide on the unique keys.
    v_n := CASE
        WHEN v_counter ~ '^[0-9]{1,19}:[0-9]{1,7}$' AND split_part(v_counter, ':', 1)::bigint = v_xid
            THEN split_part(v_counter, ':', 2)::integer + 1
        ELSE 0
    END;
    IF v_xid >= 8796093022208 OR v_n >= 1048576 THEN
        -- 2^43 transactions is decades of continuous work; refuse rather than wrap.
        IF v_xid >= 8796093022208 THEN
            RAISE EXCEPTION 'transaction id % is beyond the range of operation event positions', v_xid;
        END IF;
        RAISE EXCEPTION 'more than 1048576 operation events in one transaction';
    END IF;
    -- set_config returns the value it set: n, read back (an assignment, not a
    -- PERFORM, is the cheaper statement on this hot path).
    RETURN (v_xid << 20)
        + split_part(set_config('prme.event_seq_counter', v_xid::text || ':' || v_n::text, TRUE), ':', 2)::integer;
END;
$$;

COMMENT ON FUNCTION prme._next_event_seq() IS
'Internal: the next stream position for an operation event in this transaction: '
'(top-level transaction id << 20) + n, n counted in the transaction-local setting prme.event_seq_counter.';

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
        op.user_id, prme._next_event_seq(), op.operation_id, op.last_event_seq, op.state,
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
BEGIN
    -- One statement (it runs on every submit): read the clock and, when the
    -- interval has passed, move it and notify. An interval of 0 notifies every
    -- time; a clock that went backwards notifies too, rather than going quiet.
    PERFORM
        CASE WHEN t.interval_ms > 0 THEN setval('prme.operation_notify_clock', t.now_ms) END,
        pg_notify('prme_operations', 'ready')
    FROM (
        SELECT
            (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms,
            CASE WHEN s.setting ~ '^[0-9]{1,9}$' THEN s.setting::integer ELSE 50 END AS interval_ms
        FROM (SELECT current_setting('prme.notify_interval_ms', TRUE) AS setting) AS s
    ) AS t
    CROSS JOIN prme.operation_notify_clock AS c
    WHERE t.interval_ms = 0 OR t.now_ms - c.last_value >= t.interval_ms OR t.now_ms < c.last_value;
END;
$$;

COMMENT ON FUNCTION prme._notify_ready() IS
'Internal: NOTIFY prme_operations, ''ready'' unless one was sent less than prme.notify_interval_ms '
'milliseconds ago (default 50; 0 notifies every time).';

-- prme_app reads and writes through the API functions only (no table privileges).
ALTER TABLE prme.operations ENABLE ROW LEVEL SECURITY;
ALTER TABLE prme.operation_events ENABLE ROW LEVEL SECURITY;

-- Readers: prme_reader the rows of the owners bound to it, prme_auditor every row
-- (015_reader_bindings.sql).
GRANT SELECT ON prme.operations TO prme_reader, prme_auditor;
CREATE POLICY operations_reader_owner ON prme.operations FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY operations_auditor_all ON prme.operations FOR SELECT TO prme_auditor USING (TRUE);
GRANT SELECT ON prme.operation_events TO prme_reader, prme_auditor;
CREATE POLICY operation_events_reader_owner ON prme.operation_events FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY operation_events_auditor_all ON prme.operation_events FOR SELECT TO prme_auditor USING (TRUE);

-- prme-pg migration 0013_owner_streams: an owner's event stream continues across a move to another
-- server (prme-pg shard move, docs/SCALING.md).
--   * New table prme.owner_streams: for an owner moved here, the offset added to the seq of its
--     events written here (above the last seq it had on the previous server).
--   * New append-only table prme.imported_operation_events: the owner's events from the previous
--     server, with the seq readers saw there.
--   * prme.operation_events() merges both for a moved owner; an owner that never moved (every
--     owner until a move) reads exactly as before, after one primary-key probe of the empty
--     prme.owner_streams. No write path changes.
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0013_owner_streams.sql
-- (or prme-pg migrate; prme-pg shard migrate for every shard). It creates two empty tables and
-- replaces one function: catalog locks only, each held for a moment.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/435_owner_streams.sql

CREATE TABLE prme.owner_streams (
    user_id text PRIMARY KEY,
    seq_offset bigint NOT NULL CHECK (seq_offset >= 0),
    imported_through bigint NOT NULL CHECK (imported_through >= 0),
    moved_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE prme.owner_streams IS
'Owners moved here from another server: seq_offset is added to the seq of their events written here, '
'imported_through is the last seq of their stream on the previous server (prme-pg shard move).';

CREATE TABLE prme.imported_operation_events (
    user_id text NOT NULL,
    seq bigint NOT NULL CHECK (seq > 0),
    operation_id uuid NOT NULL,
    operation_seq integer NOT NULL CHECK (operation_seq > 0),
    state text NOT NULL CHECK (state IN ('accepted', 'blocked', 'processing', 'committed', 'rejected')),
    detail jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, seq),
    UNIQUE (user_id, operation_id, operation_seq)
);

COMMENT ON TABLE prme.imported_operation_events IS
'Append-only: the events of an owner''s operations written on a previous server, with the seq readers saw '
'there (prme-pg shard move). prme.operation_events() merges them into the owner''s stream.';

CREATE TRIGGER imported_operation_events_append_only
BEFORE UPDATE OR DELETE ON prme.imported_operation_events
FOR EACH ROW EXECUTE FUNCTION prme._refuse_change();

CREATE TRIGGER imported_operation_events_no_truncate
BEFORE TRUNCATE ON prme.imported_operation_events
FOR EACH STATEMENT EXECUTE FUNCTION prme._refuse_change();

-- >>> sql/postgres/430_operation_events.sql: a moved owner's stream

CREATE OR REPLACE FUNCTION prme.operation_events(
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
    v_offset bigint;
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

    SELECT s.seq_offset INTO v_offset FROM prme.owner_streams AS s WHERE s.user_id = v_user_id;
    IF FOUND THEN
        -- A moved owner: the imported events (all committed, always visible), then
        -- this server's, whose seq is offset above them.
        RETURN QUERY
        SELECT s.seq, s.operation_id, s.operation_seq, s.state, s.detail, s.created_at
        FROM (
            SELECT i.seq, i.operation_id, i.operation_seq, i.state, i.detail, i.created_at
            FROM prme.imported_operation_events AS i
            WHERE i.user_id = v_user_id AND i.seq > operation_events.after_seq
              AND (operation_events.operation_id IS NULL OR i.operation_id = operation_events.operation_id)
            UNION ALL
            SELECT e.seq + v_offset, e.operation_id, e.operation_seq, e.state, e.detail, e.created_at
            FROM prme.operation_events AS e
            WHERE e.user_id = v_user_id AND e.seq > operation_events.after_seq - v_offset AND e.seq < v_horizon
              AND (operation_events.operation_id IS NULL OR e.operation_id = operation_events.operation_id)
            UNION ALL
            SELECT o.accepted_seq + v_offset, o.operation_id, 1, 'accepted', '{}'::jsonb, o.created_at
            FROM prme.operations AS o
            WHERE o.user_id = v_user_id AND o.accepted_seq > operation_events.after_seq - v_offset
              AND o.accepted_seq < v_horizon
              AND (operation_events.operation_id IS NULL OR o.operation_id = operation_events.operation_id)
        ) AS s
        ORDER BY s.seq
        LIMIT operation_events.max_count;
        RETURN;
    END IF;

    -- Two sources, one stream: the rows of prme.operation_events, and the accepted
    -- events kept in the operation rows (accepted_seq, 410_operations.sql). Each
    -- side is an index range scan in seq order; the union is merged, then cut.
    IF operation_events.operation_id IS NULL THEN
        RETURN QUERY
        SELECT s.seq, s.operation_id, s.operation_seq, s.state, s.detail, s.created_at
        FROM (
            SELECT e.seq, e.operation_id, e.operation_seq, e.state, e.detail, e.created_at
            FROM prme.operation_events AS e
            WHERE e.user_id = v_user_id AND e.seq > operation_events.after_seq AND e.seq < v_horizon
            UNION ALL
            SELECT o.accepted_seq, o.operation_id, 1, 'accepted', '{}'::jsonb, o.created_at
            FROM prme.operations AS o
            WHERE o.user_id = v_user_id AND o.accepted_seq > operation_events.after_seq
              AND o.accepted_seq < v_horizon
        ) AS s
        ORDER BY s.seq
        LIMIT operation_events.max_count;
    ELSE
        RETURN QUERY
        SELECT s.seq, s.operation_id, s.operation_seq, s.state, s.detail, s.created_at
        FROM (
            SELECT e.seq, e.operation_id, e.operation_seq, e.state, e.detail, e.created_at
            FROM prme.operation_events AS e
            WHERE e.user_id = v_user_id AND e.operation_id = operation_events.operation_id
              AND e.seq > operation_events.after_seq AND e.seq < v_horizon
            UNION ALL
            SELECT o.accepted_seq, o.operation_id, 1, 'accepted', '{}'::jsonb, o.created_at
            FROM prme.operations AS o
            WHERE o.user_id = v_user_id AND o.operation_id = operation_events.operation_id
              AND o.accepted_seq > operation_events.after_seq AND o.accepted_seq < v_horizon
        ) AS s
        ORDER BY s.seq
        LIMIT operation_events.max_count;
    END IF;
END;
$$;

COMMENT ON FUNCTION prme.operation_events(text, bigint, uuid, integer) IS
'Events of user_id''s operations (or of one operation) with seq > after_seq, in seq order, at most max_count. '
'Pass the last seq seen to resume: no event is skipped or repeated, even one whose transaction commits late, '
'because only events of transactions older than every running one are shown, and across a move to another '
'server (prme-pg shard move). PR404 for an unknown operation_id.';
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (13, 'owner_streams', 'debc0abeac4bf8403b10d8302e990fc6b8febc760312370c6353e4b185c57250');

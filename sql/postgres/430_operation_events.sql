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
-- An operation's accepted event lives in its operation row (accepted_seq) and is
-- read from there, merged into the stream by seq. An owner moved here from
-- another server (prme.owner_streams, 435_owner_streams.sql) reads its imported
-- events as they were and this server's events with its offset added.
-- =============================================================================

CREATE FUNCTION prme.operation_events(
    user_id text,
    after_seq bigint DEFAULT 0,
    operation_id text DEFAULT NULL,
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
    v_id text;
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
        v_id := prme._operation_id(operation_events.operation_id);
        PERFORM FROM prme.operations AS o
        WHERE o.user_id = v_user_id AND o.operation_id = v_id;
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
              AND (v_id IS NULL OR i.operation_id = v_id)
            UNION ALL
            SELECT e.seq + v_offset, e.operation_id, e.operation_seq, e.state, e.detail, e.created_at
            FROM prme.operation_events AS e
            WHERE e.user_id = v_user_id AND e.seq > operation_events.after_seq - v_offset AND e.seq < v_horizon
              AND (v_id IS NULL OR e.operation_id = v_id)
            UNION ALL
            SELECT o.accepted_seq + v_offset, o.operation_id, 1, 'accepted', '{}'::jsonb, o.created_at
            FROM prme.operations AS o
            WHERE o.user_id = v_user_id AND o.accepted_seq > operation_events.after_seq - v_offset
              AND o.accepted_seq < v_horizon
              AND (v_id IS NULL OR o.operation_id = v_id)
        ) AS s
        ORDER BY s.seq
        LIMIT operation_events.max_count;
        RETURN;
    END IF;

    -- Two sources, one stream: the rows of prme.operation_events, and the accepted
    -- events kept in the operation rows (accepted_seq, 410_operations.sql). Each
    -- side is an index range scan in seq order; the union is merged, then cut.
    IF v_id IS NULL THEN
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
            WHERE e.user_id = v_user_id AND e.operation_id = v_id
              AND e.seq > operation_events.after_seq AND e.seq < v_horizon
            UNION ALL
            SELECT o.accepted_seq, o.operation_id, 1, 'accepted', '{}'::jsonb, o.created_at
            FROM prme.operations AS o
            WHERE o.user_id = v_user_id AND o.operation_id = v_id
              AND o.accepted_seq > operation_events.after_seq AND o.accepted_seq < v_horizon
        ) AS s
        ORDER BY s.seq
        LIMIT operation_events.max_count;
    END IF;
END;
$$;

COMMENT ON FUNCTION prme.operation_events(text, bigint, text, integer) IS
'Events of user_id''s operations (or of one operation) with seq > after_seq, in seq order, at most max_count. '
'Pass the last seq seen to resume: no event is skipped or repeated, even one whose transaction commits late, '
'because only events of transactions older than every running one are shown, and across a move to another '
'server (prme-pg shard move). PR404 for an unknown operation_id, PR422 for one that is no operation id.';

REVOKE ALL ON FUNCTION prme.operation_events(text, bigint, text, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.operation_events(text, bigint, text, integer) TO prme_app;

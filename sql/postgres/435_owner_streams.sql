-- =============================================================================
-- prme-pg: owner streams that continue from another server (scale-out)
--
-- An owner's event stream (prme.operation_events()) is ordered by seq, which is
-- built from this server's transaction ids. When `prme-pg shard move` moves an
-- owner to another shard (docs/SCALING.md), the target's transaction ids may be
-- smaller than the source's, so a reader resuming after its last seq would see
-- nothing new. The move therefore
--   * copies the owner's events as the stream showed them into
--     prme.imported_operation_events (seq as readers saw it; all committed, so
--     always visible), and
--   * records in prme.owner_streams an offset added to the seq of every event
--     written here afterwards, chosen above the last imported seq.
-- Owners that never moved have no row and read exactly as before. Written only
-- by the move (a superuser session); the API reads it through
-- prme.operation_events() (430_operation_events.sql).
-- =============================================================================

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
    operation_id text COLLATE "C" NOT NULL,
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

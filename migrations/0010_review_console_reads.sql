-- prme-pg migration 0010_review_console_reads: the reads a reviewer needs for one memory and
-- for finding memories (docs/CONSOLE.md): node_journal (one memory's chain with its head),
-- node_evidence (the events it cites), node_outcomes (its outcome events, newest first) and
-- find_nodes (search in any lifecycle state, filtered by scope, stability and state). Reads only.
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0010_review_console_reads.sql
-- (or prme-pg migrate). Its body is the four sql/postgres files named below.

SET LOCAL ROLE prme_owner;

-- >>> sql/postgres/095_node_evidence.sql

-- =============================================================================
-- prme-pg: node_evidence (the evidence a memory cites)
--
-- The events named in a memory's evidence_refs, each once, for a reviewer.
-- =============================================================================

CREATE FUNCTION prme.node_evidence(user_id text, node_id uuid, max_count integer DEFAULT 100)
RETURNS SETOF prme.events
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(node_evidence.user_id);
    v_refs uuid[];
BEGIN
    IF node_evidence.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    IF node_evidence.max_count IS NULL OR node_evidence.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    SELECT n.evidence_refs INTO v_refs FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = node_evidence.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
    -- evidence_refs keeps repeats (one per confirmation); each event is listed once.
    RETURN QUERY
    SELECT e.*
    FROM prme.events AS e
    WHERE e.user_id = v_user_id AND e.id = ANY (v_refs)
    ORDER BY e.occurred_at, e.id
    LIMIT node_evidence.max_count;
END;
$$;

COMMENT ON FUNCTION prme.node_evidence(text, uuid, integer) IS
'The events a memory of user_id cites in evidence_refs, each once, oldest first, at most max_count (1..10000). '
'PR404 for a missing or foreign memory.';

REVOKE ALL ON FUNCTION prme.node_evidence(text, uuid, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.node_evidence(text, uuid, integer) TO prme_app;

-- >>> sql/postgres/165_node_journal.sql

-- =============================================================================
-- prme-pg: node_journal (one memory's journal)
--
-- The journal of one memory with the memory's head, in chain order, for a
-- reviewer who verifies it outside the database record by record (the review
-- console; prme_pg.journal). journal_records exports a whole owner; this reads
-- one chain through the journal's primary key.
-- =============================================================================

CREATE FUNCTION prme.node_journal(user_id text, node_id uuid, max_count integer DEFAULT 1000)
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
    SELECT n.id, n.version, n.last_checksum, j.node_version, j.record_version, j.op, j.operation_id,
        j.request_id, j.evidence_id, j.record, j.checksum, j.prev_checksum
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

REVOKE ALL ON FUNCTION prme.node_journal(text, uuid, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.node_journal(text, uuid, integer) TO prme_app;

-- >>> sql/postgres/215_node_outcomes.sql

-- =============================================================================
-- prme-pg: node_outcomes (one memory's outcome events)
--
-- The outcome events of one memory, newest first, for a reviewer; outcome_summary
-- counts them, this lists them.
-- =============================================================================

CREATE FUNCTION prme.node_outcomes(user_id text, node_id uuid, max_count integer DEFAULT 100)
RETURNS SETOF prme.outcome_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(node_outcomes.user_id);
BEGIN
    IF node_outcomes.node_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'node_id must not be null';
    END IF;
    IF node_outcomes.max_count IS NULL OR node_outcomes.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    PERFORM FROM prme.nodes AS n WHERE n.user_id = v_user_id AND n.id = node_outcomes.node_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'node not found';
    END IF;
    -- Backwards along the index (user_id, node_id, created_at).
    RETURN QUERY
    SELECT (prme._outcome_view(o, FALSE)).*
    FROM prme.outcomes AS o
    WHERE o.user_id = v_user_id AND o.node_id = node_outcomes.node_id
    ORDER BY o.created_at DESC, o.id DESC
    LIMIT node_outcomes.max_count;
END;
$$;

COMMENT ON FUNCTION prme.node_outcomes(text, uuid, integer) IS
'The outcome events of one memory of user_id (any lifecycle state), newest first, at most max_count (1..10000). '
'PR404 for a missing or foreign memory.';

REVOKE ALL ON FUNCTION prme.node_outcomes(text, uuid, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.node_outcomes(text, uuid, integer) TO prme_app;

-- >>> sql/postgres/315_find_nodes.sql

-- =============================================================================
-- prme-pg: find_nodes (search and filter memories for review)
--
-- What a reviewer looks for: the owner's memories in any lifecycle state, found
-- by recall's word matching (owner-keyed lexemes, docs/RECALL.md) and filtered
-- by scope, stability and lifecycle state. Unlike recall it ranks by match and
-- recency, not by decayed strength: a faded or archived memory is still shown.
-- =============================================================================

CREATE FUNCTION prme.find_nodes(
    user_id text,
    query text DEFAULT NULL,
    scopes text[] DEFAULT NULL,
    stabilities text[] DEFAULT NULL,
    lifecycle_states text[] DEFAULT NULL,
    max_count integer DEFAULT 50
)
RETURNS SETOF prme.node_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(find_nodes.user_id);
    v_scopes text[] := prme._valid_scopes(find_nodes.scopes);
    v_lexemes text[];
    v_query tsquery;
BEGIN
    IF find_nodes.max_count IS NULL OR find_nodes.max_count NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 1000';
    END IF;
    IF octet_length(find_nodes.query) > 65536 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'query must be at most 65536 bytes',
            DETAIL = format('got %s bytes', octet_length(find_nodes.query));
    END IF;
    IF find_nodes.stabilities IS NOT NULL
        AND (
            cardinality(find_nodes.stabilities) = 0
            OR array_ndims(find_nodes.stabilities) <> 1
            OR array_position(find_nodes.stabilities, NULL) IS NOT NULL
            OR NOT find_nodes.stabilities <@ ARRAY['low', 'semi-stable', 'stable']
        ) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'stabilities must be NULL or a list of low, semi-stable and stable';
    END IF;
    IF find_nodes.lifecycle_states IS NOT NULL
        AND (
            cardinality(find_nodes.lifecycle_states) = 0
            OR array_ndims(find_nodes.lifecycle_states) <> 1
            OR array_position(find_nodes.lifecycle_states, NULL) IS NOT NULL
            OR NOT find_nodes.lifecycle_states <@ ARRAY['active', 'contested', 'superseded', 'deprecated', 'archived']
        ) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'lifecycle_states must be NULL or a list of active, contested, superseded, deprecated '
            'and archived';
    END IF;

    IF find_nodes.query IS NULL OR btrim(find_nodes.query, E' \t\n\r\f\v') = '' THEN
        RETURN QUERY
        SELECT (prme._node_view(n, FALSE)).*
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id
          AND (v_scopes IS NULL OR n.scope = ANY (v_scopes))
          AND (find_nodes.stabilities IS NULL OR n.stability = ANY (find_nodes.stabilities))
          AND (find_nodes.lifecycle_states IS NULL OR n.lifecycle_state = ANY (find_nodes.lifecycle_states))
        ORDER BY n.updated_at DESC, n.id
        LIMIT find_nodes.max_count;
        RETURN;
    END IF;

    v_lexemes := prme._owner_lexemes(v_user_id, find_nodes.query);
    IF cardinality(v_lexemes) = 0 THEN
        RETURN;  -- only stop words and punctuation: nothing can match
    END IF;
    v_query := prme._any_lexeme_query(v_lexemes);
    -- As in recall: the GIN index finds this owner's matches; the owner test rechecks.
    -- Most of the query's words first, then the most recently changed.
    RETURN QUERY
    SELECT (prme._node_view(n, FALSE)).*
    FROM prme.nodes AS n
    WHERE n.search @@ v_query
      AND n.user_id = v_user_id
      AND (v_scopes IS NULL OR n.scope = ANY (v_scopes))
      AND (find_nodes.stabilities IS NULL OR n.stability = ANY (find_nodes.stabilities))
      AND (find_nodes.lifecycle_states IS NULL OR n.lifecycle_state = ANY (find_nodes.lifecycle_states))
    ORDER BY length(n.search) - length(ts_delete(n.search, v_lexemes)) DESC, n.updated_at DESC, n.id
    LIMIT find_nodes.max_count;
END;
$$;

COMMENT ON FUNCTION prme.find_nodes(text, text, text[], text[], text[], integer) IS
'Memories of user_id in any lifecycle state for review: matching any word of query as recall matches (NULL or '
'blank: all), in the given scopes, stabilities and lifecycle states (NULL: any); most query words first, then '
'newest change first; max_count 1..1000. Nothing is written.';

REVOKE ALL ON FUNCTION prme.find_nodes(text, text, text[], text[], text[], integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.find_nodes(text, text, text[], text[], text[], integer) TO prme_app;
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (10, 'review_console_reads', 'd1a59c33350e1c9fa0b4cf620a08cf381f94dd66d60e7b30b8c2f636c1f8f2c9');

-- =============================================================================
-- prme-pg: reviews and decay bookkeeping
--
-- A memory is due for review once its next_review_at has passed; a memory without
-- next_review_at has no review schedule and is never due. A review
-- (prme.mark_reviewed, or a stability change applied from a maintenance patch)
-- sets next_review_at one cadence (of its stability) ahead, and settles the
-- outcomes seen so far: the maintenance report counts only outcomes recorded
-- since the last review, so a correction that was dealt with does not lower a
-- memory again at every run.
--
-- Overdue cycles: the first begins at next_review_at, one more at each further
-- full cadence. Decay (applied from patches, 260) is idempotent per cycle: the
-- memory's row remembers how many cycles were decayed against which
-- next_review_at (decay_anchor, decay_cycles). A review moves next_review_at, so the count
-- starts again from zero.
-- =============================================================================

CREATE FUNCTION prme._cycles_due(due_at timestamptz, as_of timestamptz, cadence_seconds double precision)
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
-- SQL-standard body, no SET clause: bound to its objects when created and inlined
-- into maintenance_report's one query (each argument appears once, so even an
-- expression argument is inlined). as_of - due_at is exact (integer microseconds)
-- and cadences are whole seconds, so floor() is exact at every cycle boundary for
-- spans within a century.
RETURN greatest(0, floor(date_part('epoch', as_of - due_at) / cadence_seconds) + 1)::integer;

COMMENT ON FUNCTION prme._cycles_due(timestamptz, timestamptz, double precision) IS
'Internal: overdue review cycles begun by as_of for a memory due at due_at (its next_review_at): 0 before, 1 from '
'due_at on, and one more for each further full cadence (cadence_seconds); 0 when due_at is null.';

CREATE FUNCTION prme.mark_reviewed(user_id text, node_id uuid, next_review_at timestamptz DEFAULT NULL)
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

    -- The review covers every outcome recorded so far (recorders hold a share lock
    -- on the node, so all of them have committed by the time we hold ours) and
    -- every confirmation: it settles the totals on the row it updates anyway.
    -- Counts only grow (outcomes are append-only), so greatest() makes settling
    -- idempotent and order-independent.
    UPDATE prme.nodes AS n SET
        next_review_at = v_after.next_review_at,
        updated_at = v_after.updated_at,
        version = v_after.version,
        last_checksum = v_after.last_checksum,
        reviewed_explicit_reinforcements
        = greatest(n.reviewed_explicit_reinforcements, n.recorded_reinforcements + n.reinforcements),
        reviewed_implicit_successes = greatest(n.reviewed_implicit_successes, n.implicit_successes),
        reviewed_neutral_exposures = greatest(n.reviewed_neutral_exposures, n.neutral_exposures),
        reviewed_explicit_corrections = greatest(n.reviewed_explicit_corrections, n.explicit_corrections),
        reviewed_at = v_now
    WHERE n.user_id = v_user_id AND n.id = mark_reviewed.node_id;
    INSERT INTO prme.journal SELECT v_entry.*;

    RETURN prme._node_view(v_after, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.mark_reviewed(text, uuid, timestamptz) IS
'Records that the owner reviewed a memory of user_id: next_review_at becomes the given future time, else now plus '
'the review cadence of its stability (this resets decay), and every outcome so far counts as seen by the review. '
'Journaled as op review. PR404 for a missing, foreign or archived node.';

REVOKE ALL ON FUNCTION prme.mark_reviewed(text, uuid, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION prme.mark_reviewed(text, uuid, timestamptz) TO prme_app;

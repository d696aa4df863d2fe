-- =============================================================================
-- prme-pg: maintenance patches (proposed changes, reviewed, applied once)
--
-- maintenance_patch stores the actionable rows of maintenance_report as a patch
-- of numbered ops (op_001, op_002, ...), set-based:
--   op                 from recommendation      risk    requires_review  default_selected
--   decay_confidence   decay_confidence         low     no               yes
--   update_stability   increase_stability       low     no               yes
--   update_stability   decrease_stability       medium  yes              yes
--   update_stability   flag_for_review          medium  yes              no
--   mark_contested     mark_contested           high    yes              no
-- Each op records exactly the change that was reviewed (field from -> to), and
-- apply_patch applies it only while the memory still shows the "from" values;
-- otherwise the op is stale and nothing changes (a later patch proposes afresh).
-- manual mode applies exactly the selected ops; auto mode applies decay ops and
-- stability increases that need no review, never a decrease or mark_contested.
-- Each op applies at most once: apply_patch locks the op rows (FOR UPDATE, in op
-- order) and an applied op records applied_at and the journal record it wrote.
-- Every applied op is one journaled node mutation (policy maintenance_v1), whose
-- operation_id is the op's operation_id.
-- =============================================================================

CREATE TABLE prme.maintenance_patches (
    user_id text NOT NULL,
    id uuid NOT NULL,
    as_of timestamptz NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, id)
);

COMMENT ON TABLE prme.maintenance_patches IS
'Proposed maintenance patches: when each was computed (as_of) and created. Its ops are in prme.patch_ops.';

CREATE TABLE prme.patch_ops (
    user_id text NOT NULL,
    patch_id uuid NOT NULL,
    op_no integer NOT NULL CHECK (op_no > 0),
    op_id text NOT NULL CHECK (op_id ~ '^op_[0-9]{3,}$'),
    op text NOT NULL CHECK (op IN ('update_stability', 'decay_confidence', 'mark_contested')),
    recommendation text NOT NULL CHECK (recommendation IN (
        'decay_confidence', 'increase_stability', 'decrease_stability', 'flag_for_review', 'mark_contested'
    )),
    node_id uuid NOT NULL,
    node_version bigint NOT NULL CHECK (node_version > 0),
    reason text NOT NULL,
    risk text NOT NULL CHECK (risk IN ('low', 'medium', 'high')),
    requires_review boolean NOT NULL,
    default_selected boolean NOT NULL,
    stability_from text,
    stability_to text,
    confidence_from numeric(5, 4),
    confidence_to numeric(5, 4),
    lifecycle_from text,
    lifecycle_to text,
    decay_anchor timestamptz,
    decay_cycles_from integer,
    decay_cycles_to integer,
    seen_explicit_reinforcements bigint NOT NULL,
    seen_implicit_successes bigint NOT NULL,
    seen_neutral_exposures bigint NOT NULL,
    seen_explicit_corrections bigint NOT NULL,
    operation_id uuid NOT NULL,
    applied_at timestamptz,
    applied_mode text CHECK (applied_mode IN ('manual', 'auto')),
    applied_version bigint,
    PRIMARY KEY (user_id, patch_id, op_no),
    UNIQUE (user_id, patch_id, op_id),
    FOREIGN KEY (user_id, patch_id) REFERENCES prme.maintenance_patches (user_id, id),
    FOREIGN KEY (user_id, node_id) REFERENCES prme.nodes (user_id, id),
    CHECK ((applied_at IS NULL) = (applied_mode IS NULL) AND (applied_at IS NULL) = (applied_version IS NULL)),
    CHECK (op <> 'update_stability' OR (stability_from IS NOT NULL AND stability_to IS NOT NULL)),
    CHECK (op <> 'mark_contested' OR (lifecycle_from IS NOT NULL AND lifecycle_to IS NOT NULL)),
    CHECK (op <> 'decay_confidence' OR (
        confidence_from IS NOT NULL AND confidence_to IS NOT NULL AND decay_anchor IS NOT NULL
        AND decay_cycles_from IS NOT NULL AND decay_cycles_to > decay_cycles_from
    ))
);

COMMENT ON TABLE prme.patch_ops IS
'The ops of maintenance patches: what each changes (from -> to), why, its risk, whether it needs review, the '
'outcome counts the proposal saw, and when (and in which mode) it was applied. Each op applies at most once.';
COMMENT ON COLUMN prme.patch_ops.operation_id IS
'The operation_id of the journal record the op writes when applied.';
COMMENT ON COLUMN prme.patch_ops.applied_version IS
'The node version (journal record) the op produced when it was applied.';

-- What maintenance_patch and get_patch return.
CREATE TYPE prme.patch_view AS (
    patch_id uuid,
    created_at timestamptz,
    as_of timestamptz,
    ops jsonb
);

COMMENT ON TYPE prme.patch_view IS
'A maintenance patch: patch_id, created_at, as_of and its ops as a JSON array.';

CREATE FUNCTION prme._patch_document(user_id text, patch_id uuid)
RETURNS prme.patch_view
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_patch prme.patch_view;
BEGIN
    SELECT
        p.id,
        p.created_at,
        p.as_of,
        coalesce((
            SELECT jsonb_agg(jsonb_build_object(
                'op_id', o.op_id,
                'op', o.op,
                'recommendation', o.recommendation,
                'target', jsonb_build_object(
                    'node_id', o.node_id, 'version', o.node_version, 'content', left(n.content, 200)
                ),
                'updates', CASE o.op
                    WHEN 'update_stability' THEN jsonb_build_object(
                        'stability', jsonb_build_object('from', o.stability_from, 'to', o.stability_to)
                    )
                    WHEN 'decay_confidence' THEN jsonb_build_object(
                        'confidence_base', jsonb_build_object(
                            'from', trim_scale(o.confidence_from), 'to', trim_scale(o.confidence_to)
                        ),
                        'decay_cycles', jsonb_build_object('from', o.decay_cycles_from, 'to', o.decay_cycles_to)
                    )
                    ELSE jsonb_build_object(
                        'lifecycle_state', jsonb_build_object('from', o.lifecycle_from, 'to', o.lifecycle_to)
                    )
                END,
                'reason', o.reason,
                'risk', o.risk,
                'requires_review', o.requires_review,
                'default_selected', o.default_selected,
                'status', CASE WHEN o.applied_at IS NULL THEN 'pending' ELSE 'applied' END,
                'applied_at', o.applied_at,
                'applied_mode', o.applied_mode
            ) ORDER BY o.op_no)
            FROM prme.patch_ops AS o
            INNER JOIN prme.nodes AS n ON n.user_id = o.user_id AND n.id = o.node_id
            WHERE o.user_id = p.user_id AND o.patch_id = p.id
        ), '[]'::jsonb)
    INTO v_patch
    FROM prme.maintenance_patches AS p
    WHERE p.user_id = _patch_document.user_id AND p.id = _patch_document.patch_id;
    RETURN v_patch;
END;
$$;

COMMENT ON FUNCTION prme._patch_document(text, uuid) IS
'Internal: a stored patch as maintenance_patch and get_patch return it (NULL when there is none): patch_id, '
'created_at, as_of and the ops '
'as a JSON array (op_id, op, recommendation, target, updates, reason, risk, requires_review, default_selected, '
'status, applied_at, applied_mode).';

CREATE FUNCTION prme.maintenance_patch(user_id text, as_of timestamptz DEFAULT NULL)
RETURNS prme.patch_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(maintenance_patch.user_id);
    v_as_of timestamptz := coalesce(prme._valid_timestamp('as_of', maintenance_patch.as_of), now());
    v_patch_id uuid := gen_random_uuid();
BEGIN
    -- A patch for the future would decay cycles that have not begun yet.
    IF v_as_of > now() THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'as_of of a patch must not be in the future',
            DETAIL = format('got %s', v_as_of);
    END IF;
    INSERT INTO prme.maintenance_patches (user_id, id, as_of, created_at)
    VALUES (v_user_id, v_patch_id, v_as_of, now());

    INSERT INTO prme.patch_ops (
        user_id, patch_id, op_no, op_id, op, recommendation, node_id, node_version, reason, risk, requires_review,
        default_selected, stability_from, stability_to, confidence_from, confidence_to, lifecycle_from,
        lifecycle_to, decay_anchor, decay_cycles_from, decay_cycles_to, seen_explicit_reinforcements,
        seen_implicit_successes, seen_neutral_exposures, seen_explicit_corrections, operation_id
    )
    SELECT
        v_user_id,
        v_patch_id,
        q.op_no,
        'op_' || CASE WHEN q.op_no < 1000 THEN lpad(q.op_no::text, 3, '0') ELSE q.op_no::text END,
        q.op,
        q.recommendation,
        q.node_id,
        q.version,
        CASE q.recommendation
            WHEN 'decay_confidence' THEN format(
                'overdue for review since %s: cycles %s to %s of %s decayed at -%s each',
                to_char(q.next_review_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                q.decayed_cycles + 1, q.overdue_cycles, q.review_cadence, trim_scale(q.decay_per_cycle)
            )
            WHEN 'increase_stability' THEN format(
                '%s explicit reinforcements and no correction since the last review', q.explicit_reinforcements
            )
            WHEN 'flag_for_review' THEN format(
                '%s implicit successes and no correction since the last review: semi-stable at most, stable '
                'needs explicit confirmation', q.implicit_successes
            )
            ELSE format('%s explicit correction(s) since the last review', q.explicit_corrections)
        END,
        q.risk,
        q.requires_review,
        q.default_selected,
        CASE WHEN q.op = 'update_stability' THEN q.stability END,
        CASE WHEN q.op = 'update_stability' THEN q.suggested_stability END,
        CASE WHEN q.op = 'decay_confidence' THEN q.confidence_base END,
        CASE WHEN q.op = 'decay_confidence' THEN q.suggested_confidence END,
        CASE WHEN q.op = 'mark_contested' THEN q.lifecycle_state END,
        CASE WHEN q.op = 'mark_contested' THEN 'contested' END,
        CASE WHEN q.op = 'decay_confidence' THEN q.next_review_at END,
        CASE WHEN q.op = 'decay_confidence' THEN q.decayed_cycles END,
        CASE WHEN q.op = 'decay_confidence' THEN q.overdue_cycles END,
        -- What a review applying this op has seen: every outcome up to as_of.
        coalesce(q.reviewed_explicit_reinforcements, 0) + q.explicit_reinforcements,
        coalesce(q.reviewed_implicit_successes, 0) + q.implicit_successes,
        coalesce(q.neutral_exposures, 0),
        coalesce(q.reviewed_explicit_corrections, 0) + q.explicit_corrections,
        gen_random_uuid()
    FROM (
        SELECT
            row_number() OVER (ORDER BY r.node_id, k.ord)::integer AS op_no,
            k.op,
            k.recommendation,
            k.risk,
            k.requires_review,
            k.default_selected,
            r.*,
            s.review_cadence,
            s.decay_per_cycle,
            n.reviewed_explicit_reinforcements,
            n.reviewed_implicit_successes,
            n.neutral_exposures,
            n.reviewed_explicit_corrections,
            n.version
        FROM prme.maintenance_report(v_user_id, v_as_of) AS r
        CROSS JOIN LATERAL unnest(r.recommendations) AS u (recommendation)
        INNER JOIN (
            VALUES
            ('decay_confidence', 1, 'decay_confidence', 'low', FALSE, TRUE),
            ('increase_stability', 2, 'update_stability', 'low', FALSE, TRUE),
            ('decrease_stability', 2, 'update_stability', 'medium', TRUE, TRUE),
            ('flag_for_review', 2, 'update_stability', 'medium', TRUE, FALSE),
            ('mark_contested', 3, 'mark_contested', 'high', TRUE, FALSE)
        ) AS k (recommendation, ord, op, risk, requires_review, default_selected)
            ON k.recommendation = u.recommendation
        INNER JOIN (
            SELECT DISTINCT ON (x.stability) x.stability, x.review_cadence, x.decay_per_cycle
            FROM prme.maintenance_settings AS x
            WHERE x.user_id IN (v_user_id, '*')
            ORDER BY x.stability, x.user_id = '*'
        ) AS s ON s.stability = r.stability
        INNER JOIN prme.nodes AS n ON n.user_id = v_user_id AND n.id = r.node_id
    ) AS q;

    RETURN prme._patch_document(v_user_id, v_patch_id);
END;
$$;

COMMENT ON FUNCTION prme.maintenance_patch(text, timestamptz) IS
'Computes the maintenance report of user_id as of a time (default now; not in the future) and stores its '
'actionable recommendations as a patch for review: returns patch_id, created_at, as_of and ops, each with op_id, '
'op (update_stability, decay_confidence or mark_contested), target, updates (from -> to), reason, risk, '
'requires_review and default_selected. Changes no memory; apply with prme.apply_patch.';

CREATE FUNCTION prme.get_patch(user_id text, patch_id uuid)
RETURNS prme.patch_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(get_patch.user_id);
    v_patch prme.patch_view;
BEGIN
    IF get_patch.patch_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'patch_id must not be null';
    END IF;
    v_patch := prme._patch_document(v_user_id, get_patch.patch_id);
    IF v_patch.patch_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'patch not found';
    END IF;
    RETURN v_patch;
END;
$$;

COMMENT ON FUNCTION prme.get_patch(text, uuid) IS
'A stored maintenance patch of user_id with the status of each op (pending or applied, when and how). '
'PR404 when it is missing or another owner''s.';

CREATE FUNCTION prme._apply_patch_op(
    op prme.patch_ops,
    OUT status text,
    OUT detail text,
    OUT node_version bigint
)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_node prme.nodes;
    v_after prme.nodes;
    v_entry prme.journal;
    v_done integer;
    v_now timestamptz := now();
BEGIN
    status := 'stale';
    SELECT n.* INTO v_node
    FROM prme.nodes AS n
    WHERE n.user_id = op.user_id AND n.id = op.node_id
    FOR UPDATE;
    IF NOT FOUND OR v_node.lifecycle_state NOT IN ('active', 'contested') THEN
        detail := format('the memory is %s', coalesce(v_node.lifecycle_state, 'gone'));
        RETURN;
    END IF;
    v_after := v_node;

    CASE op.op
        WHEN 'decay_confidence' THEN
            v_done := CASE WHEN v_node.decay_anchor = v_node.next_review_at THEN v_node.decay_cycles ELSE 0 END;
            IF v_node.next_review_at IS DISTINCT FROM op.decay_anchor THEN
                detail := 'the review schedule changed since the patch was proposed';
                RETURN;
            END IF;
            IF v_done <> op.decay_cycles_from THEN
                detail := format('%s overdue cycles are decayed already, the patch expected %s',
                    v_done, op.decay_cycles_from);
                RETURN;
            END IF;
            IF v_node.confidence_base <> op.confidence_from THEN
                detail := format('confidence_base is %s now, the patch expected %s',
                    trim_scale(v_node.confidence_base), trim_scale(op.confidence_from));
                RETURN;
            END IF;
            v_after.confidence_base := op.confidence_to;
        WHEN 'update_stability' THEN
            IF v_node.stability <> op.stability_from THEN
                detail := format('stability is %s now, the patch expected %s', v_node.stability, op.stability_from);
                RETURN;
            END IF;
            IF op.recommendation IN ('increase_stability', 'flag_for_review') AND v_node.lifecycle_state <> 'active' THEN
                detail := format('the memory is %s: stability is raised for active memories only',
                    v_node.lifecycle_state);
                RETURN;
            END IF;
            -- A stability change is a review: the cadence restarts from now.
            v_after.stability := op.stability_to;
            v_after.next_review_at := prme._plus_cadence(
                v_now, (prme._maintenance_setting(op.user_id, op.stability_to)).review_cadence
            );
        ELSE
            IF v_node.lifecycle_state <> op.lifecycle_from THEN
                detail := format('lifecycle_state is %s now, the patch expected %s',
                    v_node.lifecycle_state, op.lifecycle_from);
                RETURN;
            END IF;
            v_after.lifecycle_state := op.lifecycle_to;
    END CASE;

    v_after.updated_at := v_now;
    v_after.version := v_node.version + 1;
    v_entry := prme._journal_entry(op.op, 'maintenance_v1', op.operation_id, NULL, NULL, v_node, v_after);
    v_after.last_checksum := v_entry.checksum;
    -- Decay records its cycles; stability changes and mark_contested are reviewed
    -- decisions, which settle the outcomes the proposal saw (as mark_reviewed does).
    UPDATE prme.nodes AS n SET
        confidence_base = v_after.confidence_base,
        stability = v_after.stability,
        next_review_at = v_after.next_review_at,
        lifecycle_state = v_after.lifecycle_state,
        updated_at = v_after.updated_at,
        version = v_after.version,
        last_checksum = v_after.last_checksum,
        decay_anchor = CASE WHEN op.op = 'decay_confidence' THEN op.decay_anchor ELSE n.decay_anchor END,
        decay_cycles = CASE WHEN op.op = 'decay_confidence' THEN op.decay_cycles_to ELSE n.decay_cycles END,
        reviewed_explicit_reinforcements = CASE WHEN op.op = 'decay_confidence' THEN n.reviewed_explicit_reinforcements
            ELSE greatest(n.reviewed_explicit_reinforcements, op.seen_explicit_reinforcements) END,
        reviewed_implicit_successes = CASE WHEN op.op = 'decay_confidence' THEN n.reviewed_implicit_successes
            ELSE greatest(n.reviewed_implicit_successes, op.seen_implicit_successes) END,
        reviewed_neutral_exposures = CASE WHEN op.op = 'decay_confidence' THEN n.reviewed_neutral_exposures
            ELSE greatest(n.reviewed_neutral_exposures, op.seen_neutral_exposures) END,
        reviewed_explicit_corrections = CASE WHEN op.op = 'decay_confidence' THEN n.reviewed_explicit_corrections
            ELSE greatest(n.reviewed_explicit_corrections, op.seen_explicit_corrections) END,
        reviewed_at = CASE WHEN op.op = 'decay_confidence' THEN n.reviewed_at ELSE v_now END
    WHERE n.user_id = op.user_id AND n.id = op.node_id;
    INSERT INTO prme.journal SELECT v_entry.*;

    status := 'applied';
    node_version := v_after.version;
END;
$$;

COMMENT ON FUNCTION prme._apply_patch_op(prme.patch_ops) IS
'Internal: applies one patch op under the memory''s row lock if the memory still shows what the op expects '
'(else status stale, with the reason in detail), journaled as op decay_confidence, update_stability or '
'mark_contested with policy maintenance_v1. The caller holds the op row lock and records the application.';

CREATE FUNCTION prme.apply_patch(
    user_id text,
    patch_id uuid,
    op_ids text[] DEFAULT NULL,
    mode text DEFAULT 'manual'
)
RETURNS TABLE (op_id text, op text, node_id uuid, status text, detail text, node_version bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(apply_patch.user_id);
    v_ids text[];
    v_missing text[];
    v_op_nos integer[];
    v_op prme.patch_ops;
    v_result record;
BEGIN
    IF apply_patch.patch_id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'patch_id must not be null';
    END IF;
    IF apply_patch.mode IS NULL OR apply_patch.mode NOT IN ('manual', 'auto') THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'mode must be manual or auto';
    END IF;
    IF apply_patch.mode = 'manual' THEN
        IF apply_patch.op_ids IS NULL OR array_position(apply_patch.op_ids, NULL) IS NOT NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422', MESSAGE = 'manual mode applies the selected ops: op_ids must list them';
        END IF;
        IF cardinality(apply_patch.op_ids) > 10000
           OR (SELECT max(length(x.id)) FROM unnest(apply_patch.op_ids) AS x (id)) > 64 THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR422', MESSAGE = 'op_ids must list at most 10000 op ids of at most 64 characters';
        END IF;
        v_ids := ARRAY(SELECT DISTINCT x.id FROM unnest(apply_patch.op_ids) AS x (id));
    ELSIF apply_patch.op_ids IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422', MESSAGE = 'auto mode chooses its ops: op_ids must be null';
    END IF;

    PERFORM FROM prme.maintenance_patches AS p WHERE p.user_id = v_user_id AND p.id = apply_patch.patch_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR404', MESSAGE = 'patch not found';
    END IF;
    -- The chosen ops by number: a manual selection looks each listed id up (so the
    -- work grows with the ids given, not with their product with the patch's ops).
    IF apply_patch.mode = 'manual' THEN
        SELECT
            array_agg(x.id ORDER BY x.id) FILTER (WHERE o.op_no IS NULL),
            array_agg(o.op_no) FILTER (WHERE o.op_no IS NOT NULL)
        INTO v_missing, v_op_nos
        FROM unnest(v_ids) AS x (id)
        LEFT JOIN prme.patch_ops AS o
            ON o.user_id = v_user_id AND o.patch_id = apply_patch.patch_id AND o.op_id = x.id;
        IF v_missing IS NOT NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = 'PR404', MESSAGE = 'operation not found in this patch',
                DETAIL = format('unknown op_ids: %s%s', array_to_string(v_missing[1:20], ', '),
                    CASE WHEN cardinality(v_missing) > 20 THEN format(' and %s more', cardinality(v_missing) - 20) END);
        END IF;
    ELSE
        v_op_nos := ARRAY(
            SELECT o.op_no FROM prme.patch_ops AS o
            WHERE o.user_id = v_user_id AND o.patch_id = apply_patch.patch_id
              AND (o.op = 'decay_confidence' OR (o.recommendation = 'increase_stability' AND NOT o.requires_review))
        );
    END IF;

    -- Lock the chosen ops in op order (which is memory order, so concurrent applies
    -- of overlapping patches lock memories in the same order). A second apply of
    -- the same ops waits here and then sees them applied.
    FOR v_op IN
        SELECT o.*
        FROM prme.patch_ops AS o
        WHERE o.user_id = v_user_id
          AND o.patch_id = apply_patch.patch_id
          AND o.op_no = ANY(v_op_nos)
        ORDER BY o.op_no
        FOR UPDATE
    LOOP
        op_id := v_op.op_id;
        op := v_op.op;
        node_id := v_op.node_id;
        IF v_op.applied_at IS NOT NULL THEN
            status := 'already_applied';
            detail := format('applied at %s in %s mode', v_op.applied_at, v_op.applied_mode);
            node_version := v_op.applied_version;
        ELSE
            v_result := prme._apply_patch_op(v_op);
            status := v_result.status;
            detail := v_result.detail;
            node_version := v_result.node_version;
            IF v_result.status = 'applied' THEN
                UPDATE prme.patch_ops AS o SET
                    applied_at = now(),
                    applied_mode = apply_patch.mode,
                    applied_version = v_result.node_version
                WHERE o.user_id = v_user_id AND o.patch_id = v_op.patch_id AND o.op_no = v_op.op_no;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION prme.apply_patch(text, uuid, text[], text) IS
'Applies ops of a maintenance patch of user_id. manual: exactly the ops listed in op_ids (at most 10000 ids of at '
'most 64 characters; PR404 if one is not in the patch); auto (op_ids null): decay ops and stability increases that need no review, never a decrease or '
'mark_contested. One row per op considered: status applied, already_applied or stale (the memory changed since '
'the proposal; nothing written). Each op applies at most once, also under concurrent calls.';

REVOKE ALL ON FUNCTION prme.maintenance_patch(text, timestamptz) FROM public;
GRANT EXECUTE ON FUNCTION prme.maintenance_patch(text, timestamptz) TO prme_app;
REVOKE ALL ON FUNCTION prme.get_patch(text, uuid) FROM public;
GRANT EXECUTE ON FUNCTION prme.get_patch(text, uuid) TO prme_app;
REVOKE ALL ON FUNCTION prme.apply_patch(text, uuid, text[], text) FROM public;
GRANT EXECUTE ON FUNCTION prme.apply_patch(text, uuid, text[], text) TO prme_app;
ALTER TABLE prme.maintenance_patches ENABLE ROW LEVEL SECURITY;
ALTER TABLE prme.patch_ops ENABLE ROW LEVEL SECURITY;

-- Readers: prme_reader the rows of the owners bound to it, prme_auditor every row
-- (015_reader_bindings.sql).
GRANT SELECT ON prme.maintenance_patches TO prme_reader, prme_auditor;
CREATE POLICY maintenance_patches_reader_owner ON prme.maintenance_patches FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY maintenance_patches_auditor_all ON prme.maintenance_patches FOR SELECT TO prme_auditor USING (TRUE);
GRANT SELECT ON prme.patch_ops TO prme_reader, prme_auditor;
CREATE POLICY patch_ops_reader_owner ON prme.patch_ops FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY patch_ops_auditor_all ON prme.patch_ops FOR SELECT TO prme_auditor USING (TRUE);

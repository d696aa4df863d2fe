-- prme-pg migration 0019_review_from_start: a new memory is on a review schedule from the start
-- (issue 18 item 3), so decay happens without the caller managing dates.
--   * prme.add_node: next_review_at NULL (the default) is now plus the review cadence of the
--     memory's stability (the owner's setting, else the default); 'infinity' means no review
--     schedule and is stored as NULL; a finite time is stored as before.
--   Memories created before keep their next_review_at (NULL stays NULL): nothing is rewritten.
-- Apply with: psql -1 -v ON_ERROR_STOP=1 -f migrations/0019_review_from_start.sql
-- (or prme-pg migrate). It replaces one function: catalog locks only, held for a moment.
-- Its body is copied from sql/postgres/080_add_node.sql.

SET LOCAL ROLE prme_owner;

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
    v_node.lifecycle_state := 'active';
    v_node.created_at := v_now;
    -- On a review schedule from the start, so that decay needs no date from the
    -- caller: one cadence of its stability ahead, unless a time is given, or
    -- 'infinity' (never due: no schedule, stored as NULL).
    IF add_node.next_review_at = 'infinity' THEN
        v_node.next_review_at := NULL;
    ELSE
        v_node.next_review_at := coalesce(
            prme._valid_timestamp('next_review_at', add_node.next_review_at),
            prme._plus_cadence(v_now, (prme._maintenance_setting(v_node.user_id, v_node.stability)).review_cadence)
        );
    END IF;
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
'Creates a memory for user_id and journals it as a create record. next_review_at defaults to now plus the review '
'cadence of its stability (the owner''s setting); ''infinity'' means no review schedule (stored as NULL). node_id '
'may be given (PR409 if taken); otherwise a random one is chosen. Invalid arguments raise PR422.';
-- prme-pg:seal (everything above this line is hashed; do not edit this file)
INSERT INTO prme.schema_migrations (version, name, sha256) VALUES (19, 'review_from_start', '7201eda1088a39c2467ab4e10b319d8954293948a798a8be9daec3fa85f7fe0a');

-- =============================================================================
-- prme-pg: add_node
--
-- A memory, its create record, and (when the caller embedded its content) its
-- vector by embedding_model: derived state in prme.node_embeddings, not journaled
-- (305_embeddings.sql). Without a vector the memory is recalled by its words at
-- once and by meaning once the embedding worker has passed.
-- =============================================================================

CREATE FUNCTION prme.add_node(
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
    node_id uuid DEFAULT NULL,
    embedding real[] DEFAULT NULL,
    embedding_model text DEFAULT NULL
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
    v_embedding real[];
BEGIN
    -- A model's first vector registers it with its dimensions (each shard its own, behind
    -- PL/Proxy); a known model's vector must fit it.
    IF add_node.embedding IS NOT NULL AND add_node.embedding_model IS NOT NULL
       AND NOT EXISTS (
           SELECT FROM prme.embedding_models AS m WHERE m.user_id = '*' AND m.model_id = add_node.embedding_model
       ) THEN
        PERFORM prme.register_embedding_model(add_node.embedding_model, cardinality(add_node.embedding));
    END IF;
    v_embedding := prme._valid_embedding(add_node.embedding_model, add_node.embedding);
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
    IF v_embedding IS NOT NULL THEN
        INSERT INTO prme.node_embeddings (user_id, node_id, model_id, embedding)
        VALUES (v_node.user_id, v_node.id, add_node.embedding_model, v_embedding);
    END IF;
    RETURN prme._node_view(v_node, FALSE);
END;
$$;

COMMENT ON FUNCTION prme.add_node(text, text, text, text, text, numeric, numeric, text, text, timestamptz, uuid, real[], text) IS
'Creates a memory for user_id and journals it as a create record. next_review_at defaults to now plus the review '
'cadence of its stability (the owner''s setting); ''infinity'' means no review schedule (stored as NULL). node_id '
'may be given (PR409 if taken); otherwise a random one is chosen. embedding, a vector of the content by the model '
'embedding_model (registered by its first vector), is stored beside the memory (not journaled). Invalid arguments '
'raise PR422.';

REVOKE ALL ON FUNCTION prme.add_node(text, text, text, text, text, numeric, numeric, text, text, timestamptz, uuid, real[], text) FROM public;
GRANT EXECUTE ON FUNCTION prme.add_node(text, text, text, text, text, numeric, numeric, text, text, timestamptz, uuid, real[], text) TO prme_app;

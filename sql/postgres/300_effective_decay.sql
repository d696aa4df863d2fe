-- =============================================================================
-- prme-pg: effective salience and confidence (virtual decay)
--
-- Memories fade at read time; nothing is written back. For a memory whose last
-- confirmation (or, never confirmed, whose creation) was t days before as_of:
--   effective_salience   = clamp01(salience_base * e^(-λt) + reinforcement_boost * e^(-0.10t))
--   effective_confidence = clamp01(confidence_base * e^(-(λ/2)t))
-- with λ by decay_profile: permanent 0, slow 0.005, medium 0.02, fast 0.07,
-- rapid 0.2. t is never negative (a reference time after as_of counts as t = 0).
--
-- These are ranking scores, not journal values: they are double precision
-- (exp() on numeric is far slower and its exactness buys nothing for a ranking),
-- and they never reach a checksum. e^(-x) is taken as exactly 0 for x >= 700,
-- where float8 would underflow.
--
-- The helpers are LANGUAGE sql with SQL-standard bodies (RETURN ...): bound to
-- their objects when created, so search_path cannot redirect them, and inlined
-- into the calling query, so ranking 1,000 memories costs no function calls.
-- Inlining is also why they carry no SET search_path clause. See docs/RECALL.md.
-- =============================================================================

CREATE FUNCTION prme._decay_rate(decay_profile text)
RETURNS double precision
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN CASE decay_profile
    WHEN 'permanent' THEN 0.0::double precision
    WHEN 'slow' THEN 0.005::double precision
    WHEN 'medium' THEN 0.02::double precision
    WHEN 'fast' THEN 0.07::double precision
    WHEN 'rapid' THEN 0.2::double precision
END;

COMMENT ON FUNCTION prme._decay_rate(text) IS
'Internal: λ per day for a decay_profile: permanent 0, slow 0.005, medium 0.02, fast 0.07, rapid 0.2.';

CREATE FUNCTION prme._decay_factor(rate double precision, age_days double precision)
RETURNS double precision
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN CASE
    WHEN rate * age_days >= 700.0 THEN 0.0::double precision
    ELSE pg_catalog.exp(-(rate * age_days))
END;

COMMENT ON FUNCTION prme._decay_factor(double precision, double precision) IS
'Internal: e^(-rate * age_days), exactly 0 from an exponent of -700 on (where float8 exp would underflow).';

CREATE FUNCTION prme._age_days(reference timestamptz, as_of timestamptz)
RETURNS double precision
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN greatest(
    0.0::double precision,
    pg_catalog.date_part('epoch', as_of - reference) / 86400.0::double precision
);

COMMENT ON FUNCTION prme._age_days(timestamptz, timestamptz) IS
'Internal: days (fractional, 86,400 s each) from reference to as_of; 0 when reference is later than as_of.';

CREATE FUNCTION prme._effective_salience(
    salience_base numeric,
    reinforcement_boost numeric,
    decay_profile text,
    age_days double precision
)
RETURNS double precision
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN least(
    1.0::double precision,
    greatest(
        0.0::double precision,
        salience_base::double precision * prme._decay_factor(prme._decay_rate(decay_profile), age_days)
        + reinforcement_boost::double precision * prme._decay_factor(0.10::double precision, age_days)
    )
);

COMMENT ON FUNCTION prme._effective_salience(numeric, numeric, text, double precision) IS
'Internal: salience_base * e^(-λt) + reinforcement_boost * e^(-0.10t), clamped to [0, 1] (t = age_days).';

CREATE FUNCTION prme._effective_confidence(
    confidence_base numeric,
    decay_profile text,
    age_days double precision
)
RETURNS double precision
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN least(
    1.0::double precision,
    greatest(
        0.0::double precision,
        confidence_base::double precision
        * prme._decay_factor(prme._decay_rate(decay_profile) / 2.0::double precision, age_days)
    )
);

COMMENT ON FUNCTION prme._effective_confidence(numeric, text, double precision) IS
'Internal: confidence_base * e^(-(λ/2)t), clamped to [0, 1] (t = age_days).';

CREATE FUNCTION prme.effective_nodes(
    user_id text,
    as_of timestamptz DEFAULT now(),
    after_node_id uuid DEFAULT NULL,
    max_count integer DEFAULT 100
)
RETURNS TABLE (
    id uuid,
    namespace text,
    scope text,
    kind text,
    lifecycle_state text,
    decay_profile text,
    salience_base numeric,
    reinforcement_boost numeric,
    confidence_base numeric,
    decay_from timestamptz,
    age_days double precision,
    effective_salience double precision,
    effective_confidence double precision
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(effective_nodes.user_id);
    v_as_of timestamptz := prme._valid_timestamp('as_of', coalesce(effective_nodes.as_of, now()));
BEGIN
    IF effective_nodes.max_count IS NULL OR effective_nodes.max_count NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'max_count must be between 1 and 10000';
    END IF;
    -- Keyset pagination over the primary key, as prme.list_nodes.
    RETURN QUERY
    SELECT d.id, d.namespace::text, d.scope::text, d.kind::text, d.lifecycle_state::text, d.decay_profile::text,
        d.salience_base::numeric, d.reinforcement_boost::numeric, d.confidence_base::numeric, d.decay_from, d.age_days,
        prme._effective_salience(d.salience_base, d.reinforcement_boost, d.decay_profile, d.age_days),
        prme._effective_confidence(d.confidence_base, d.decay_profile, d.age_days)
    FROM (
        SELECT n.*, coalesce(n.last_reinforced_at, n.created_at) AS decay_from,
            prme._age_days(coalesce(n.last_reinforced_at, n.created_at), v_as_of) AS age_days
        FROM prme.nodes AS n
        WHERE n.user_id = v_user_id
          AND (effective_nodes.after_node_id IS NULL OR n.id > effective_nodes.after_node_id)
        ORDER BY n.id
        LIMIT effective_nodes.max_count
    ) AS d
    ORDER BY d.id;
END;
$$;

COMMENT ON FUNCTION prme.effective_nodes(text, timestamptz, uuid, integer) IS
'Pages through the memories of user_id (every lifecycle state) in id order with their effective salience and '
'confidence at as_of (default now; NULL means now): virtual decay from last_reinforced_at, or created_at when '
'never confirmed. Nothing is written. Pass the last id as after_node_id; max_count is 1..10000.';

REVOKE ALL ON FUNCTION prme.effective_nodes(text, timestamptz, uuid, integer) FROM public;
GRANT EXECUTE ON FUNCTION prme.effective_nodes(text, timestamptz, uuid, integer) TO prme_app;

-- Proposal 2: the pure helpers as inlinable LANGUAGE sql functions.
--
-- A LANGUAGE sql function whose body is a single SELECT of one expression, with no
-- SET clause, not SECURITY DEFINER and no stronger volatility than its body, is
-- inlined by the planner into the calling expression: PL/pgSQL plans
-- `v_x := prme._node_state(v_node)` once and caches the plan, so the helper costs
-- nothing per call: no function call, no PL/pgSQL frame, no GUC switch, no per-call
-- planning. (A SQL function that is NOT inlined, e.g. because of a SET clause, is
-- planned on every call before PostgreSQL 18: the issue's hint.)
--
-- Bodies are unchanged expressions, so the records are byte-identical (checked by
-- bench/run.py --compare, which verifies the journal of the proposal database).
-- _sha256_hex becomes STABLE (convert_to is STABLE; an IMMUTABLE SQL function
-- with a STABLE body is not inlined). Helpers that raise or run queries
-- (_valid_*, _key_replays, _journal_entry, _add_outcome) stay PL/pgSQL with their
-- SET clause, so tests/pgtap/test_security.sql holds as it is: its search_path rule
-- covers PL/pgSQL functions, and an inlined SQL body has no execution context of
-- its own: it is planned inside its caller, an API function that pins search_path.

CREATE OR REPLACE FUNCTION prme._reinforced_boost(boost numeric)
RETURNS numeric
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT greatest(boost, least(boost + 0.15, 0.5))
$$;

CREATE OR REPLACE FUNCTION prme._reinforced_confidence(confidence numeric)
RETURNS numeric
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT greatest(confidence, least(confidence + 0.05, 0.95))
$$;

CREATE OR REPLACE FUNCTION prme._json_time(value timestamptz)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT coalesce('"' || to_char(value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '"', 'null')
$$;

CREATE OR REPLACE FUNCTION prme._sha256_hex(value text)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT encode(sha256(convert_to(value, 'UTF8')), 'hex')
$$;

CREATE OR REPLACE FUNCTION prme._node_view(node prme.nodes, replayed boolean)
RETURNS prme.node_view
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT ROW(
        node.id, node.user_id, node.namespace, node.scope, node.kind, node.content,
        node.confidence_base, node.salience_base, node.reinforcement_boost, node.last_reinforced_at,
        node.evidence_refs, node.stability, node.next_review_at, node.lifecycle_state,
        node.decay_profile, node.created_at, node.updated_at, node.version, replayed
    )::prme.node_view
$$;

CREATE OR REPLACE FUNCTION prme._node_state(node prme.nodes)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT '{"confidence_base":' || trim_scale(node.confidence_base)::text
        || ',"content":' || to_json(node.content)::text
        || ',"created_at":' || prme._json_time(node.created_at)
        || ',"decay_profile":' || to_json(node.decay_profile)::text
        || ',"evidence_refs":' || array_to_json(node.evidence_refs)::text
        || ',"id":"' || node.id::text
        || '","kind":' || to_json(node.kind)::text
        || ',"last_reinforced_at":' || prme._json_time(node.last_reinforced_at)
        || ',"lifecycle_state":' || to_json(node.lifecycle_state)::text
        || ',"namespace":' || to_json(node.namespace)::text
        || ',"next_review_at":' || prme._json_time(node.next_review_at)
        || ',"reinforcement_boost":' || trim_scale(node.reinforcement_boost)::text
        || ',"salience_base":' || trim_scale(node.salience_base)::text
        || ',"scope":' || to_json(node.scope)::text
        || ',"stability":' || to_json(node.stability)::text
        || ',"updated_at":' || prme._json_time(node.updated_at)
        || ',"user_id":' || to_json(node.user_id)::text
        || ',"version":' || node.version::text
        || '}'
$$;

CREATE OR REPLACE FUNCTION prme._journal_record_v2(
    op text,
    policy text,
    operation_id uuid,
    request_id uuid,
    user_id text,
    node_id uuid,
    evidence_id uuid,
    before_state text,
    after_state text,
    prev_checksum text,
    recorded_at timestamptz
)
RETURNS text
LANGUAGE sql
STABLE
AS $$
    SELECT '{"after":' || after_state
        || ',"before":' || coalesce(before_state, 'null')
        || ',"evidence_id":' || coalesce('"' || evidence_id::text || '"', 'null')
        || ',"node_id":"' || node_id::text
        || '","op":' || to_json(op)::text
        || ',"operation_id":"' || operation_id::text
        || '","policy":' || coalesce(to_json(policy)::text, 'null')
        || ',"prev_checksum":' || coalesce('"' || prev_checksum || '"', 'null')
        || ',"recorded_at":' || prme._json_time(recorded_at)
        || ',"request_id":' || coalesce('"' || request_id::text || '"', 'null')
        || ',"user_id":' || to_json(user_id)::text
        || ',"version":2}'
$$;

CREATE OR REPLACE FUNCTION prme._outcome_weight(outcome text)
RETURNS numeric
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT CASE outcome
        WHEN 'explicit_reinforcement' THEN 1.0
        WHEN 'implicit_success' THEN 0.2
        WHEN 'neutral_exposure' THEN 0
        WHEN 'explicit_correction' THEN -1.0
    END
$$;

-- =============================================================================
-- prme-pg: add_event
-- =============================================================================

CREATE FUNCTION prme.add_event(
    user_id text,
    content text,
    scope text DEFAULT 'personal',
    namespace text DEFAULT 'default',
    kind text DEFAULT 'message',
    payload jsonb DEFAULT '{}',
    occurred_at timestamptz DEFAULT NULL,
    event_id uuid DEFAULT NULL
)
RETURNS prme.events
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_event prme.events;
BEGIN
    v_event.id := coalesce(add_event.event_id, gen_random_uuid());
    v_event.user_id := prme._valid_user_id(add_event.user_id);
    v_event.namespace := prme._valid_name('namespace', add_event.namespace);
    v_event.scope := prme._valid_name('scope', add_event.scope);
    v_event.kind := prme._valid_name('kind', add_event.kind);
    v_event.content := prme._valid_content(add_event.content);
    IF add_event.payload IS NULL OR jsonb_typeof(add_event.payload) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must be a JSON object';
    END IF;
    IF octet_length(add_event.payload::text) > 65536 THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'payload must be at most 65536 bytes of JSON';
    END IF;
    v_event.payload := add_event.payload;
    v_event.created_at := now();
    v_event.occurred_at := coalesce(
        prme._valid_timestamp('occurred_at', add_event.occurred_at), v_event.created_at);

    INSERT INTO prme.events SELECT v_event.* ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PR409', MESSAGE = 'an event with this event_id already exists';
    END IF;
    RETURN v_event;
END;
$$;

COMMENT ON FUNCTION prme.add_event(text, text, text, text, text, jsonb, timestamptz, uuid) IS
'Records immutable evidence for user_id. occurred_at defaults to now; event_id may be given (PR409 if taken).';

REVOKE ALL ON FUNCTION prme.add_event(text, text, text, text, text, jsonb, timestamptz, uuid) FROM public;
GRANT EXECUTE ON FUNCTION prme.add_event(text, text, text, text, text, jsonb, timestamptz, uuid) TO prme_app;

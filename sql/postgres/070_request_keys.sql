-- =============================================================================
-- prme-pg: request_keys (idempotency keys)
--
-- A retried call with the same request_id must count once. A key is scoped to
-- (user_id, namespace): another owner's identical UUID is an independent key.
-- A confirmation's key is its own journal record (request_id, index
-- journal_request_key, 060): it writes no row here. This table holds the keys of
-- calls that journal nothing (record_outcome). The row binds the key to what it
-- did (operation, node, evidence) and to the journal record of the node state it
-- saw; it is written in the call's transaction, so an aborted call leaves no key
-- behind. prme._is_replay reads both places.
-- =============================================================================

CREATE TABLE prme.request_keys (
    user_id text NOT NULL,
    namespace text NOT NULL,
    request_id uuid NOT NULL,
    operation text NOT NULL CHECK (operation ~ '^[a-z][a-z0-9_]{0,62}$'),
    node_id uuid NOT NULL,
    evidence_id uuid,
    node_version bigint NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, namespace, request_id),
    FOREIGN KEY (user_id, node_id, node_version) REFERENCES prme.journal (user_id, node_id, node_version)
);

COMMENT ON TABLE prme.request_keys IS
'Idempotency keys per (user_id, namespace) of calls that write no journal record (record_outcome): what each '
'request_id did and the journal record of the node state it saw. A confirmation''s key is its journal record.';

-- No role but prme_owner reads the keys: row-level security without a policy.
ALTER TABLE prme.request_keys ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON prme.request_keys FROM public;

-- Not the key's namespace: the lock is taken before anything is read, and a key
-- is unique per namespace, so two calls of one owner that use one request_id in two
-- namespaces only wait for each other, as two colliding hashes do.
CREATE FUNCTION prme._key_lock(user_id text, request_id uuid)
RETURNS bigint
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN hashtextextended(user_id || '/' || request_id::text, 0);

COMMENT ON FUNCTION prme._key_lock(text, uuid) IS
'Internal: the transaction advisory lock key of an owner''s request_id. The calls that claim a key in different '
'places (reinforce: its journal record; record_outcome: prme.request_keys) hold it while they check and claim, '
'so a key reused by another kind of call is PR409 even when both race. A hash collision only makes two '
'calls wait for each other.';

CREATE FUNCTION prme._is_replay(
    user_id text,
    namespace text,
    request_id uuid,
    operation text,
    node_id uuid,
    evidence_id uuid
)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_key record;
BEGIN
    -- Where the key lives, in one read: a confirmation's key is its journal record
    -- (index journal_request_key), record_outcome's a prme.request_keys row. A key is
    -- in one place only (both kinds of call claim it under its advisory lock).
    SELECT u.operation, u.node_id, u.evidence_id INTO v_key
    FROM (
        SELECT j.op AS operation, j.node_id, j.evidence_id
        FROM prme.journal AS j
        WHERE j.user_id = _is_replay.user_id
          AND j.key_namespace = _is_replay.namespace
          AND j.request_id = _is_replay.request_id
        UNION ALL
        SELECT k.operation, k.node_id, k.evidence_id
        FROM prme.request_keys AS k
        WHERE k.user_id = _is_replay.user_id
          AND k.namespace = _is_replay.namespace
          AND k.request_id = _is_replay.request_id
    ) AS u
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN FALSE;
    END IF;
    IF v_key.operation = _is_replay.operation AND v_key.node_id = _is_replay.node_id
       AND v_key.evidence_id IS NOT DISTINCT FROM _is_replay.evidence_id THEN
        RETURN TRUE;
    END IF;
    RAISE EXCEPTION USING
        ERRCODE = 'PR409',
        MESSAGE = 'request_id was already used for another request',
        DETAIL = 'an idempotency key is bound to one operation, node and evidence';
END;
$$;

COMMENT ON FUNCTION prme._is_replay(text, text, uuid, text, uuid, uuid) IS
'Internal (volatile on purpose: each call reads with a fresh snapshot, so it sees keys committed while the '
'caller waited for the key''s advisory lock): true when a committed key binds request_id to this same operation, '
'node and evidence (the call is a replay); false when the key is unused; PR409 when it is bound to anything else. '
'A key is a journal record carrying request_id (reinforce) or a prme.request_keys row (record_outcome).';

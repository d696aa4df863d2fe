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

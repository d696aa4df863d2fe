-- =============================================================================
-- prme-pg DuckDB port: tables of a memory pack
--
-- The same tables and columns as PostgreSQL's prme schema (docs/DESIGN.md section 2),
-- with DuckDB types: DECIMAL(5,4) numbers, TIMESTAMPTZ times, UUID[] evidence.
-- Primary keys are the same and lead with user_id. What DuckDB cannot express is
-- kept by the single-writer transaction of prme_pg.backends.duckdb instead:
-- foreign keys (DuckDB cannot defer them, and rejects updates of a referenced
-- row) and the append-only triggers of events and journal. verify_journal
-- (030_checks.sql) detects any change made behind its back.
-- Applied on every open; every statement is idempotent. A pack of an older format is
-- brought to this one by prme_pg.backends.duckdb (_upgrade_pack) right after.
-- =============================================================================

CREATE SCHEMA IF NOT EXISTS prme;

CREATE TABLE IF NOT EXISTS prme.pack_info (
    key VARCHAR PRIMARY KEY,
    value VARCHAR NOT NULL
);

-- The names' and the checksum's CHECKs are PostgreSQL's rules ('^[a-z][a-z0-9_-]{0,62}$',
-- '^[0-9a-f]{64}$') written without regular expressions (pack format 4): DuckDB compiles a
-- CHECK's regular expression each time a statement that writes the column is bound, about
-- 0.5 ms each, and a confirmation's two node writes bound eight of them. Only ASCII from the
-- allowed set passes ltrim, so strlen counts characters. The other tables keep
-- regexp_full_match for now (the journal's two cost a confirmation about 1 ms).
CREATE TABLE IF NOT EXISTS prme.nodes (
    id UUID NOT NULL,
    user_id VARCHAR NOT NULL,
    namespace VARCHAR NOT NULL DEFAULT 'default' CHECK (
        strlen(namespace) BETWEEN 1 AND 63 AND left(namespace, 1) BETWEEN 'a' AND 'z'
        AND ltrim(namespace, 'abcdefghijklmnopqrstuvwxyz0123456789_-') = ''
    ),
    scope VARCHAR NOT NULL DEFAULT 'personal' CHECK (
        strlen(scope) BETWEEN 1 AND 63 AND left(scope, 1) BETWEEN 'a' AND 'z'
        AND ltrim(scope, 'abcdefghijklmnopqrstuvwxyz0123456789_-') = ''
    ),
    kind VARCHAR NOT NULL DEFAULT 'fact' CHECK (
        strlen(kind) BETWEEN 1 AND 63 AND left(kind, 1) BETWEEN 'a' AND 'z'
        AND ltrim(kind, 'abcdefghijklmnopqrstuvwxyz0123456789_-') = ''
    ),
    content VARCHAR NOT NULL,
    confidence_base DECIMAL(5, 4) NOT NULL DEFAULT 0.5 CHECK (confidence_base BETWEEN 0 AND 1),
    salience_base DECIMAL(5, 4) NOT NULL DEFAULT 0.5 CHECK (salience_base BETWEEN 0 AND 1),
    reinforcement_boost DECIMAL(5, 4) NOT NULL DEFAULT 0 CHECK (reinforcement_boost BETWEEN 0 AND 1),
    last_reinforced_at TIMESTAMPTZ,
    evidence_refs UUID [] NOT NULL DEFAULT [],
    stability VARCHAR NOT NULL DEFAULT 'low' CHECK (stability IN ('low', 'semi-stable', 'stable')),
    next_review_at TIMESTAMPTZ,
    lifecycle_state VARCHAR NOT NULL DEFAULT 'active'
    CHECK (lifecycle_state IN ('active', 'contested', 'superseded', 'deprecated', 'archived')),
    decay_profile VARCHAR NOT NULL DEFAULT 'medium'
    CHECK (decay_profile IN ('permanent', 'slow', 'medium', 'fast', 'rapid')),
    created_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL,
    version BIGINT NOT NULL CHECK (version > 0),
    -- Derived: checksum of this node's newest journal record (the next record's link).
    last_checksum VARCHAR NOT NULL CHECK (
        strlen(last_checksum) = 64 AND ltrim(last_checksum, '0123456789abcdef') = ''
    ),
    -- Derived bookkeeping, as on PostgreSQL's prme.nodes (sql/postgres/040_nodes.sql,
    -- docs/MAINTENANCE.md section 7), written by the statements that write the memory's
    -- row anyway, so that outcome readers and the maintenance report read one row per
    -- memory: applied confirmations (each also a journal record of op reinforce), the
    -- running totals of its outcome rows, the totals its last review settled
    -- (reviewed_explicit_reinforcements over confirmations and outcome rows together),
    -- and the overdue cycles decayed against the next_review_at in decay_anchor. Not
    -- part of a node's state in the journal.
    reinforcements BIGINT NOT NULL DEFAULT 0,
    recorded_reinforcements BIGINT NOT NULL DEFAULT 0,
    implicit_successes BIGINT NOT NULL DEFAULT 0,
    neutral_exposures BIGINT NOT NULL DEFAULT 0,
    explicit_corrections BIGINT NOT NULL DEFAULT 0,
    last_outcome_at TIMESTAMPTZ,
    reviewed_explicit_reinforcements BIGINT NOT NULL DEFAULT 0,
    reviewed_implicit_successes BIGINT NOT NULL DEFAULT 0,
    reviewed_neutral_exposures BIGINT NOT NULL DEFAULT 0,
    reviewed_explicit_corrections BIGINT NOT NULL DEFAULT 0,
    reviewed_at TIMESTAMPTZ,
    decay_anchor TIMESTAMPTZ,
    decay_cycles INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, id)
);

CREATE TABLE IF NOT EXISTS prme.events (
    id UUID NOT NULL,
    user_id VARCHAR NOT NULL,
    namespace VARCHAR NOT NULL DEFAULT 'default' CHECK (regexp_full_match(namespace, '[a-z][a-z0-9_-]{0,62}')),
    scope VARCHAR NOT NULL DEFAULT 'personal' CHECK (regexp_full_match(scope, '[a-z][a-z0-9_-]{0,62}')),
    kind VARCHAR NOT NULL DEFAULT 'message' CHECK (regexp_full_match(kind, '[a-z][a-z0-9_-]{0,62}')),
    content VARCHAR NOT NULL,
    payload JSON NOT NULL DEFAULT '{}',
    occurred_at TIMESTAMPTZ NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, id)
);

CREATE TABLE IF NOT EXISTS prme.journal (
    user_id VARCHAR NOT NULL,
    node_id UUID NOT NULL,
    node_version BIGINT NOT NULL CHECK (node_version > 0),
    record_version SMALLINT NOT NULL CHECK (record_version IN (1, 2)),
    op VARCHAR NOT NULL,
    operation_id UUID NOT NULL,
    request_id UUID,
    evidence_id UUID,
    record VARCHAR NOT NULL,
    checksum VARCHAR NOT NULL CHECK (regexp_full_match(checksum, '[0-9a-f]{64}')),
    prev_checksum VARCHAR CHECK (regexp_full_match(prev_checksum, '[0-9a-f]{64}')),
    recorded_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, node_id, node_version),
    CHECK (record_version = 2 OR (request_id IS NULL AND prev_checksum IS NULL))
);

-- Pack format 2 (migration 0012_hot_path): a record's request_id is also the
-- idempotency key of the confirmation that wrote it, scoped by key_namespace (the
-- node's namespace, set exactly when request_id is), unique per (user_id,
-- key_namespace, request_id). A format 1 pack's reinforce keys move here once.
ALTER TABLE prme.journal ADD COLUMN IF NOT EXISTS key_namespace VARCHAR;
-- Before the keys move in below: DuckDB creates no index over a table with updates
-- outstanding in the same transaction. NULLs are distinct: records without a key
-- never collide.
CREATE UNIQUE INDEX IF NOT EXISTS journal_request_key ON prme.journal (user_id, key_namespace, request_id);

CREATE TABLE IF NOT EXISTS prme.request_keys (
    user_id VARCHAR NOT NULL,
    namespace VARCHAR NOT NULL,
    request_id UUID NOT NULL,
    operation VARCHAR NOT NULL CHECK (regexp_full_match(operation, '[a-z][a-z0-9_]{0,62}')),
    node_id UUID NOT NULL,
    evidence_id UUID,
    node_version BIGINT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, namespace, request_id)
);

-- Keys of calls that write no journal record; a confirmation's key is its record.
UPDATE prme.journal AS j SET key_namespace = k.namespace
FROM prme.request_keys AS k
WHERE k.operation = 'reinforce' AND k.user_id = j.user_id AND k.node_id = j.node_id
  AND k.node_version = j.node_version AND k.request_id = j.request_id AND j.key_namespace IS NULL;
DELETE FROM prme.request_keys AS k
WHERE k.operation = 'reinforce' AND EXISTS (
    SELECT 1 FROM prme.journal AS j
    WHERE j.user_id = k.user_id AND j.key_namespace = k.namespace AND j.request_id = k.request_id
);

-- HTTP bearer tokens (sql/postgres/140_api_tokens.sql): the sha256 of each token and the
-- one owner it acts for; tokens themselves are never stored. `prme-pg token create --pack`
-- mints them, `prme-pg serve --pack` checks them.
CREATE TABLE IF NOT EXISTS prme.api_tokens (
    user_id VARCHAR NOT NULL,
    token_sha256 VARCHAR NOT NULL CHECK (regexp_full_match(token_sha256, '[0-9a-f]{64}')),
    label VARCHAR NOT NULL DEFAULT '' CHECK (length(label) <= 200),
    created_at TIMESTAMPTZ NOT NULL,
    revoked_at TIMESTAMPTZ,
    PRIMARY KEY (user_id, token_sha256)
);

-- Snapshot generations (sql/postgres/320_snapshots.sql): immutable documents keyed by the
-- sha256 of their text, one current pointer per (user_id, scope) that only moves forward,
-- and the log of its advances. Append-only and forward-only are kept by the pack's single
-- writer (DuckDB has no triggers); reads verify every document against its id.
CREATE TABLE IF NOT EXISTS prme.snapshot_generations (
    user_id VARCHAR NOT NULL,
    scope VARCHAR NOT NULL CHECK (regexp_full_match(scope, '[a-z][a-z0-9_-]{0,62}')),
    generation_id VARCHAR NOT NULL,
    document VARCHAR NOT NULL,
    item_count INTEGER NOT NULL CHECK (item_count BETWEEN 0 AND 10000),
    byte_size INTEGER NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, scope, generation_id),
    CHECK (generation_id = sha256(document) AND byte_size = octet_length(encode(document)))
);

CREATE TABLE IF NOT EXISTS prme.snapshot_heads (
    user_id VARCHAR NOT NULL,
    scope VARCHAR NOT NULL,
    generation_id VARCHAR NOT NULL,
    seq BIGINT NOT NULL CHECK (seq > 0),
    advanced_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, scope)
);

CREATE TABLE IF NOT EXISTS prme.snapshot_history (
    user_id VARCHAR NOT NULL,
    scope VARCHAR NOT NULL,
    seq BIGINT NOT NULL CHECK (seq > 0),
    generation_id VARCHAR NOT NULL,
    previous_generation_id VARCHAR,
    advanced_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, scope, seq),
    CHECK (generation_id IS DISTINCT FROM previous_generation_id),
    CHECK ((seq = 1) = (previous_generation_id IS NULL))
);

-- Recall's words of each memory (prme.recall_words of its content, 020_rules.sql), one row
-- per word: the pack's inverted index, what nodes.search is on PostgreSQL. Written with the
-- node, never changed (content never changes); derived, so not part of a node's state.
-- A pack written before this table existed is indexed when first opened.
CREATE TABLE IF NOT EXISTS prme.node_words (
    user_id VARCHAR NOT NULL,
    node_id UUID NOT NULL,
    word VARCHAR NOT NULL
);

-- Review cadence and decay per overdue cycle for each stability
-- (sql/postgres/230_maintenance_settings.sql): rows of user_id '*' are the defaults, an
-- owner's row overrides one stability. Cadences are whole seconds, no months.
CREATE TABLE IF NOT EXISTS prme.maintenance_settings (
    user_id VARCHAR NOT NULL,
    stability VARCHAR NOT NULL CHECK (stability IN ('low', 'semi-stable', 'stable')),
    review_cadence INTERVAL NOT NULL CHECK (
        review_cadence >= INTERVAL 1 HOUR AND review_cadence <= INTERVAL 3650 DAYS
        AND date_part('month', review_cadence) = 0 AND date_part('year', review_cadence) = 0
        AND date_part('microseconds', review_cadence) % 1000000 = 0
    ),
    decay_per_cycle DECIMAL(5, 4) NOT NULL CHECK (decay_per_cycle BETWEEN 0 AND 1),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, stability)
);

INSERT OR IGNORE INTO prme.maintenance_settings (user_id, stability, review_cadence, decay_per_cycle) VALUES
('*', 'low', INTERVAL 7 DAYS, 0.15),
('*', 'semi-stable', INTERVAL 30 DAYS, 0.15),
('*', 'stable', INTERVAL 90 DAYS, 0.05);

-- Outcome events (sql/postgres/210_outcomes.sql): append-only evidence of what happened
-- when a memory was used. A confirmation writes no row here: its explicit_reinforcement
-- outcome is its journal record (op reinforce), as on PostgreSQL since migration 0014.
-- Append-only is kept by the pack's single writer.
CREATE TABLE IF NOT EXISTS prme.outcomes (
    user_id VARCHAR NOT NULL,
    id UUID NOT NULL,
    node_id UUID NOT NULL,
    outcome VARCHAR NOT NULL
    CHECK (outcome IN ('explicit_reinforcement', 'implicit_success', 'neutral_exposure', 'explicit_correction')),
    weight DECIMAL(3, 2) NOT NULL,
    evidence_id UUID,
    profile_id VARCHAR CHECK (length(profile_id) BETWEEN 1 AND 256),
    thread_id VARCHAR CHECK (length(thread_id) BETWEEN 1 AND 256),
    notes VARCHAR CHECK (octet_length(encode(notes)) <= 65536),
    request_id UUID,
    recorded_by VARCHAR NOT NULL
    CHECK (recorded_by IN ('record_outcome', 'reinforce', 'link_correction', 'resolve_correction')),
    node_version BIGINT NOT NULL CHECK (node_version > 0),
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, id),
    CHECK (weight = CASE outcome
        WHEN 'explicit_reinforcement' THEN 1.0
        WHEN 'implicit_success' THEN 0.2
        WHEN 'neutral_exposure' THEN 0
        WHEN 'explicit_correction' THEN -1.0
    END)
);

-- Correction messages that matched no candidate memory or several
-- (sql/postgres/220_correction_linking.sql), kept for the owner to link or dismiss.
CREATE TABLE IF NOT EXISTS prme.correction_inbox (
    user_id VARCHAR NOT NULL,
    id UUID NOT NULL,
    message VARCHAR NOT NULL,
    thread_id VARCHAR CHECK (length(thread_id) BETWEEN 1 AND 256),
    candidate_node_ids UUID [] NOT NULL,
    matched_node_ids UUID [] NOT NULL,
    reason VARCHAR NOT NULL CHECK (reason IN ('no_match', 'ambiguous')),
    created_at TIMESTAMPTZ NOT NULL,
    resolution VARCHAR CHECK (resolution IN ('linked', 'dismissed')),
    resolved_node_id UUID,
    outcome_id UUID,
    resolved_at TIMESTAMPTZ,
    PRIMARY KEY (user_id, id),
    CHECK ((reason = 'ambiguous') = (len(matched_node_ids) >= 2))
);

-- Maintenance patches and their ops (sql/postgres/260_patches.sql): what each op changes
-- (from -> to), why, its risk, the outcome counts the proposal saw, and when it was applied.
CREATE TABLE IF NOT EXISTS prme.maintenance_patches (
    user_id VARCHAR NOT NULL,
    id UUID NOT NULL,
    as_of TIMESTAMPTZ NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, id)
);

CREATE TABLE IF NOT EXISTS prme.patch_ops (
    user_id VARCHAR NOT NULL,
    patch_id UUID NOT NULL,
    op_no INTEGER NOT NULL CHECK (op_no > 0),
    op_id VARCHAR NOT NULL CHECK (regexp_full_match(op_id, 'op_[0-9]{3,}')),
    op VARCHAR NOT NULL CHECK (op IN ('update_stability', 'decay_confidence', 'mark_contested')),
    recommendation VARCHAR NOT NULL CHECK (recommendation IN (
        'decay_confidence', 'increase_stability', 'decrease_stability', 'flag_for_review', 'mark_contested'
    )),
    node_id UUID NOT NULL,
    node_version BIGINT NOT NULL CHECK (node_version > 0),
    reason VARCHAR NOT NULL,
    risk VARCHAR NOT NULL CHECK (risk IN ('low', 'medium', 'high')),
    requires_review BOOLEAN NOT NULL,
    default_selected BOOLEAN NOT NULL,
    stability_from VARCHAR,
    stability_to VARCHAR,
    confidence_from DECIMAL(5, 4),
    confidence_to DECIMAL(5, 4),
    lifecycle_from VARCHAR,
    lifecycle_to VARCHAR,
    decay_anchor TIMESTAMPTZ,
    decay_cycles_from INTEGER,
    decay_cycles_to INTEGER,
    seen_explicit_reinforcements BIGINT NOT NULL,
    seen_implicit_successes BIGINT NOT NULL,
    seen_neutral_exposures BIGINT NOT NULL,
    seen_explicit_corrections BIGINT NOT NULL,
    operation_id UUID NOT NULL,
    applied_at TIMESTAMPTZ,
    applied_mode VARCHAR CHECK (applied_mode IN ('manual', 'auto')),
    applied_version BIGINT,
    PRIMARY KEY (user_id, patch_id, op_no),
    UNIQUE (user_id, patch_id, op_id)
);

-- Embeddings (sql/postgres/305_embeddings.sql): the registered models (rows of the reserved
-- owner '*'), and each memory's vector per model, or the error of a failed attempt. Derived
-- state: no journal record names them and no confirmation writes them. A pack written before
-- these tables existed gains them, empty, when opened (its memories await `prme-pg embed`).
CREATE TABLE IF NOT EXISTS prme.embedding_models (
    user_id VARCHAR NOT NULL CHECK (user_id = '*'),
    model_id VARCHAR NOT NULL CHECK (length(model_id) BETWEEN 1 AND 200),
    dimensions INTEGER NOT NULL CHECK (dimensions BETWEEN 1 AND 4096),
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, model_id)
);

CREATE TABLE IF NOT EXISTS prme.node_embeddings (
    user_id VARCHAR NOT NULL,
    node_id UUID NOT NULL,
    model_id VARCHAR NOT NULL,
    embedding FLOAT [],
    error VARCHAR CHECK (length(error) <= 2000),
    embedded_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, model_id, node_id),
    CHECK ((embedding IS NULL) <> (error IS NULL))
);

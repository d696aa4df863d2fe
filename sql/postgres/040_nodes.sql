-- =============================================================================
-- prme-pg: nodes (memories)
--
-- One row per memory, keyed (user_id, id) so the table can be distributed by
-- owner. Numbers are numeric(5,4): caps hold exactly and journal records spell
-- them the same way in PostgreSQL, DuckDB and Python. The columns from
-- last_checksum on are derived (the chain link, recall's words, the confirmation
-- count, and the maintenance bookkeeping): they are not part of a node's state in
-- the journal. None is generated or kept by a trigger, and none of the columns a
-- confirmation changes is indexed, so its UPDATE is HOT-eligible (docs/REINFORCE.md).
-- The value rules are the columns' domains (035_domains.sql), not table CHECK
-- constraints: an UPDATE checks only the columns it sets.
-- =============================================================================

-- Recall's words (docs/RECALL.md, "Words"): one tokenizer that PostgreSQL and the
-- DuckDB memory pack (sql/duckdb/020_rules.sql, prme.recall_words) compute alike, so
-- both rank alike; PostgreSQL's english parser and Snowball stemmer cannot be matched
-- in DuckDB without an extension. A word is a maximal run of characters other than
-- ASCII punctuation, spaces and controls, Latin-1 punctuation (U+0080-U+00BF, U+00D7,
-- U+00F7), general punctuation (U+2000-U+206F), CJK punctuation (U+3000-U+303F) and
-- U+FEFF; ASCII letters are lower-cased (no other case folding, so no locale decides
-- anything); words longer than 100 characters and English stop words are dropped;
-- words of 4 characters or more lose a plural ending (Harman's S stemmer: -ies -> -y,
-- -es -> -e except after a, e, o, -s -> nothing except after u or s).
CREATE FUNCTION prme._stop_words()
RETURNS text[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN ARRAY[
    'i', 'me', 'my', 'myself', 'we', 'our', 'ours', 'ourselves', 'you', 'your', 'yours', 'yourself',
    'yourselves', 'he', 'him', 'his', 'himself', 'she', 'her', 'hers', 'herself', 'it', 'its', 'itself',
    'they', 'them', 'their', 'theirs', 'themselves', 'what', 'which', 'who', 'whom', 'this', 'that', 'these',
    'those', 'am', 'is', 'are', 'was', 'were', 'be', 'been', 'being', 'have', 'has', 'had',
    'having', 'do', 'does', 'did', 'doing', 'a', 'an', 'the', 'and', 'but', 'if', 'or',
    'because', 'as', 'until', 'while', 'of', 'at', 'by', 'for', 'with', 'about', 'against', 'between',
    'into', 'through', 'during', 'before', 'after', 'above', 'below', 'to', 'from', 'up', 'down', 'in',
    'out', 'on', 'off', 'over', 'under', 'again', 'further', 'then', 'once', 'here', 'there', 'when',
    'where', 'why', 'how', 'all', 'any', 'both', 'each', 'few', 'more', 'most', 'other', 'some',
    'such', 'no', 'nor', 'not', 'only', 'own', 'same', 'so', 'than', 'too', 'very', 's',
    't', 'can', 'will', 'just', 'don', 'should', 'now'
]::text[];

COMMENT ON FUNCTION prme._stop_words() IS
'Internal: the English stop words recall ignores (the list of PostgreSQL''s english dictionary, 127 words).';

CREATE FUNCTION prme._recall_words(content text)
RETURNS text[]
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN (
    SELECT coalesce(array_agg(s.word ORDER BY convert_to(s.word, 'UTF8')), '{}')
    FROM (
        SELECT DISTINCT
            CASE
                WHEN length(t.token) < 4 THEN t.token
                WHEN t.token LIKE '%ies' AND t.token NOT LIKE '%eies' AND t.token NOT LIKE '%aies'
                    THEN substr(t.token, 1, length(t.token) - 3) || 'y'
                WHEN
                    t.token LIKE '%es' AND t.token NOT LIKE '%aes' AND t.token NOT LIKE '%ees'
                    AND t.token NOT LIKE '%oes'
                    THEN substr(t.token, 1, length(t.token) - 1)
                WHEN t.token LIKE '%s' AND t.token NOT LIKE '%us' AND t.token NOT LIKE '%ss'
                    THEN substr(t.token, 1, length(t.token) - 1)
                ELSE t.token
            END AS word
        FROM
            regexp_split_to_table(
                translate(content, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'),  -- noqa: RF03
                '[\x01-\x2f\x3a-\x40\x5b-\x60\x7b-\xbf\xd7\xf7\u2000-\u206f\u3000-\u303f\ufeff]+'
            ) AS t (token)
        WHERE t.token <> '' AND length(t.token) <= 100 AND array_position(prme._stop_words(), t.token) IS NULL
    ) AS s
);

COMMENT ON FUNCTION prme._recall_words(text) IS
'Internal: the distinct words of content as recall matches them (docs/RECALL.md, "Words"), sorted by bytes; '
'the DuckDB pack''s prme.recall_words computes the same.';

-- The words of content that recall matches, each keyed by its owner: the first 16
-- hex digits of sha256(user_id), a slash, the word (prme._recall_words). A GIN index
-- over them leads with the owner in every key, so an owner's posting list for a
-- word holds that owner's memories only (docs/RECALL.md). PL/pgSQL, whose plans are
-- kept: as a SQL function it was planned on each call, 0.2 ms of every add_node and recall.
CREATE FUNCTION prme._owner_lexemes(user_id text, content text)
RETURNS text[]
LANGUAGE plpgsql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key text := substr(encode(sha256(convert_to(_owner_lexemes.user_id, 'UTF8')), 'hex'), 1, 16) || '/';
    -- Computed apart: in the query's FROM it was planned there on every call.
    v_words text[] := prme._recall_words(_owner_lexemes.content);
BEGIN
    RETURN ARRAY(SELECT v_key || w.word FROM unnest(v_words) WITH ORDINALITY AS w (word, n) ORDER BY w.n);
END;
$$;

COMMENT ON FUNCTION prme._owner_lexemes(text, text) IS
'Internal: the words of content (prme._recall_words), each prefixed by its owner key (16 hex digits of '
'sha256(user_id)) and a slash: what nodes.search holds and recall matches.';

CREATE TABLE prme.nodes (
    id uuid NOT NULL,
    user_id text NOT NULL,
    namespace prme.slug NOT NULL DEFAULT 'default',
    scope prme.slug NOT NULL DEFAULT 'personal',
    kind prme.slug NOT NULL DEFAULT 'fact',
    content text NOT NULL,
    confidence_base prme.unit_interval NOT NULL DEFAULT 0.5,
    salience_base prme.unit_interval NOT NULL DEFAULT 0.5,
    reinforcement_boost prme.unit_interval NOT NULL DEFAULT 0,
    last_reinforced_at timestamptz,
    evidence_refs prme.uuid_list NOT NULL DEFAULT '{}',
    stability prme.stability NOT NULL DEFAULT 'low',
    next_review_at timestamptz,
    lifecycle_state prme.lifecycle_state NOT NULL DEFAULT 'active',
    decay_profile prme.decay_profile NOT NULL DEFAULT 'medium',
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    version prme.version_number NOT NULL,
    -- Derived: checksum of this node's newest journal record, so a mutation finds
    -- its chain link under the row lock without reading the journal.
    last_checksum prme.sha256_digest NOT NULL,
    -- Derived: the owner-keyed lexemes of content (docs/RECALL.md), written once by
    -- add_node (content never changes). A plain column, not a generated one:
    -- PostgreSQL recomputes a stored generated column on every UPDATE of the row.
    search tsvector,
    -- Derived: applied confirmations (prme.reinforce), each also a journal record
    -- of op reinforce; counted here by the confirmation's own UPDATE so that
    -- outcome readers and maintenance need no row of their own (docs/MAINTENANCE.md).
    reinforcements prme.counter NOT NULL DEFAULT 0,
    -- Derived maintenance bookkeeping (docs/MAINTENANCE.md, "Scale"), kept on the
    -- memory so that the maintenance report reads one row per memory: the running
    -- totals of its outcome rows (prme.outcomes, added to by prme._add_outcome), the
    -- totals its last review settled (reviewed_explicit_reinforcements over
    -- confirmations and outcome rows together), and the overdue cycles decayed
    -- against its schedule. None is indexed, so their UPDATEs stay HOT too; the
    -- counters are checked (prme.counter) only by the writes that set them, never by
    -- a confirmation's UPDATE.
    recorded_reinforcements prme.counter NOT NULL DEFAULT 0,
    implicit_successes prme.counter NOT NULL DEFAULT 0,
    neutral_exposures prme.counter NOT NULL DEFAULT 0,
    explicit_corrections prme.counter NOT NULL DEFAULT 0,
    last_outcome_at timestamptz,
    reviewed_explicit_reinforcements prme.counter NOT NULL DEFAULT 0,
    reviewed_implicit_successes prme.counter NOT NULL DEFAULT 0,
    reviewed_neutral_exposures prme.counter NOT NULL DEFAULT 0,
    reviewed_explicit_corrections prme.counter NOT NULL DEFAULT 0,
    reviewed_at timestamptz,
    decay_anchor timestamptz,
    decay_cycles integer NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, id)
)
-- Room on each page for the next version of its rows: a confirmation's UPDATE
-- stays on the page (HOT) and adds no entry to the primary key or the GIN index.
WITH (fillfactor = 90);

COMMENT ON TABLE prme.nodes IS
'Memories. Every mutation bumps version and appends one prme.journal record in the same transaction.';
COMMENT ON COLUMN prme.nodes.evidence_refs IS
'Ids of the prme.events that confirmed this memory, appended in order, never de-duplicated.';
COMMENT ON COLUMN prme.nodes.last_checksum IS
'Derived: checksum of the newest journal record of this node (the link for the next record).';
COMMENT ON COLUMN prme.nodes.search IS
'Derived: prme._owner_lexemes(user_id, content) as a tsvector, written once by add_node (content never changes). '
'Not part of journal states.';
COMMENT ON COLUMN prme.nodes.reinforcements IS
'Derived: confirmations applied by prme.reinforce that count as explicit_reinforcement outcomes (each is the '
'newest of the node''s journal records of op reinforce). Not part of journal states.';
COMMENT ON COLUMN prme.nodes.recorded_reinforcements IS
'Derived: explicit_reinforcement outcome rows of the memory in prme.outcomes (record_outcome; confirmations are '
'counted by reinforcements). This and the other outcome and review columns are maintenance bookkeeping, not part '
'of journal states (docs/MAINTENANCE.md).';
COMMENT ON COLUMN prme.nodes.reviewed_explicit_reinforcements IS
'Derived: the explicit reinforcements (confirmations and outcome rows together) the memory''s last review saw.';
COMMENT ON COLUMN prme.nodes.decay_cycles IS
'Derived: overdue review cycles already decayed against the next_review_at in decay_anchor.';

-- Recall asks about one owner: every key of this index starts with the owner's key,
-- so a lookup reads one owner's postings for each query word, however large the table.
-- Its pending list (words written since the last merge, which every recall reads through
-- linearly) is kept to 256 kB rather than 4 MB: up to 0.1 ms of a recall rather than 2 ms
-- after a burst of writes, while writes keep the list's batching (docs/PERFORMANCE.md).
CREATE INDEX nodes_search_idx ON prme.nodes USING gin (search) WITH (gin_pending_list_limit = 256);

-- Readers: prme_reader the rows of the owners bound to it, prme_auditor every row
-- (015_reader_bindings.sql).
ALTER TABLE prme.nodes ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON prme.nodes FROM public;
GRANT SELECT ON prme.nodes TO prme_reader, prme_auditor;
CREATE POLICY nodes_reader_owner ON prme.nodes FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY nodes_auditor_all ON prme.nodes FOR SELECT TO prme_auditor USING (TRUE);

-- What API functions return: the node (without derived columns) plus whether a
-- retried request was answered from its idempotency key.
CREATE TYPE prme.node_view AS (
    id uuid,
    user_id text,
    namespace text,
    scope text,
    kind text,
    content text,
    confidence_base numeric(5, 4),  -- noqa: LT01
    salience_base numeric(5, 4),  -- noqa: LT01
    reinforcement_boost numeric(5, 4),  -- noqa: LT01
    last_reinforced_at timestamptz,
    evidence_refs uuid[],  -- noqa: LT01
    stability text,
    next_review_at timestamptz,
    lifecycle_state text,
    decay_profile text,
    created_at timestamptz,
    updated_at timestamptz,
    version bigint,
    replayed boolean
);

COMMENT ON TYPE prme.node_view IS
'A memory as API functions return it: every column of prme.nodes but derived ones, plus replayed.';

-- A SQL-standard body, no SET clause: inlined into its caller (see _node_state below).
CREATE FUNCTION prme._node_view(node prme.nodes, replayed boolean)
RETURNS prme.node_view
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
RETURN ROW(  -- noqa: CP03
    node.id, node.user_id, node.namespace, node.scope, node.kind, node.content,
    node.confidence_base, node.salience_base, node.reinforcement_boost, node.last_reinforced_at,
    node.evidence_refs, node.stability, node.next_review_at, node.lifecycle_state,
    node.decay_profile, node.created_at, node.updated_at, node.version, replayed
)::prme.node_view;

COMMENT ON FUNCTION prme._node_view(prme.nodes, boolean) IS
'Internal: the API view of a node row (drops derived columns, adds replayed).';

-- SQL-standard bodies, no SET clause (here, in 025's _json_time, 060's
-- _journal_record_v2, 110's caps): bound to their objects when created, so the
-- session's search_path cannot reach them, and inlined into the statement that
-- calls them. Every confirmation builds two node states and a record with them
-- (docs/REINFORCE.md, "Hot path").
CREATE FUNCTION prme._node_state(node prme.nodes)
RETURNS text
LANGUAGE sql
STABLE
PARALLEL SAFE
-- RFC 8785 text built directly: keys in sorted order, no whitespace. to_json()
-- escapes strings exactly as RFC 8785 does; trim_scale() gives the shortest
-- decimal form of a numeric(5,4) (0.6500 -> 0.65, 1.0000 -> 1). One format()
-- rather than a chain of ||: each transaction sets up every function call of the
-- expression again, so fewer calls make every confirmation cheaper.
RETURN format(
    '{"confidence_base":%s,"content":%s,"created_at":%s,"decay_profile":%s,"evidence_refs":%s,"id":"%s",'
    '"kind":%s,"last_reinforced_at":%s,"lifecycle_state":%s,"namespace":%s,"next_review_at":%s,'
    '"reinforcement_boost":%s,"salience_base":%s,"scope":%s,"stability":%s,"updated_at":%s,"user_id":%s,'
    '"version":%s}',
    trim_scale(node.confidence_base), to_json(node.content), prme._json_time(node.created_at),
    to_json(node.decay_profile), array_to_json(node.evidence_refs), node.id, to_json(node.kind),
    prme._json_time(node.last_reinforced_at), to_json(node.lifecycle_state), to_json(node.namespace),
    prme._json_time(node.next_review_at), trim_scale(node.reinforcement_boost), trim_scale(node.salience_base),
    to_json(node.scope), to_json(node.stability), prme._json_time(node.updated_at), to_json(node.user_id),
    node.version
);

COMMENT ON FUNCTION prme._node_state(prme.nodes) IS
'Internal: the complete state of a node as RFC 8785 canonical JSON, as journal records embed it '
'(every column but derived ones).';

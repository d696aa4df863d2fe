-- =============================================================================
-- prme-pg DuckDB port: the rules, as macros
--
-- Each macro mirrors a PostgreSQL function of sql/postgres and must produce the
-- same bytes for the same inputs (tests/test_conformance.py compares them):
--   prme.trim_scale           trim_scale() of a numeric(5,4): 0.6500 -> 0.65, 1.0000 -> 1
--   prme.json_string          to_json(text): an RFC 8785 string
--   prme.json_time            prme._json_time: "YYYY-MM-DDTHH:MM:SS.ffffffZ" (UTC) or null
--   prme.node_state           prme._node_state: a node as RFC 8785 canonical JSON
--   prme.journal_record_v2    prme._journal_record_v2: the text of a version 2 record
--   prme.reinforced_boost     prme._reinforced_boost (policy additive_caps_v1)
--   prme.reinforced_confidence prme._reinforced_confidence (policy additive_caps_v1)
--   prme.reinforced           the after state of reinforce (docs/DESIGN.md section 3, step 5)
--   prme.archived             the after state of archive_node
--   prme.age_days, prme.decay_rate, prme.decay_factor, prme.effective_salience,
--   prme.effective_confidence  virtual decay (sql/postgres/300_effective_decay.sql)
-- A node is a STRUCT with the columns of prme.nodes (a row alias such as `n` in
-- `FROM prme.nodes AS n` is one). Recreated on every open, so a pack always runs
-- the rules of the prme_pg that opened it.
-- =============================================================================

CREATE OR REPLACE MACRO prme.trim_scale(fraction) AS
rtrim(rtrim(CAST(CAST(fraction AS DECIMAL(5, 4)) AS VARCHAR), '0'), '.');

CREATE OR REPLACE MACRO prme.utc_text(instant) AS
strftime(timezone('UTC', CAST(instant AS TIMESTAMPTZ)), '%Y-%m-%dT%H:%M:%S.%fZ');

-- timezone('UTC', ...) gives a plain TIMESTAMP, so the text never depends on the
-- session's TimeZone setting.
CREATE OR REPLACE MACRO prme.json_time(instant) AS
coalesce('"' || prme.utc_text(instant) || '"', 'null');

-- RFC 8785 strings are what PostgreSQL's to_json(text) writes: \" \\ \b \f \n \r \t,
-- other control characters as \u00xx, everything else as is. DuckDB's to_json does
-- the same except that it spells the hex digits of \u00xx in uppercase (\u001F),
-- which RFC 8785 forbids. prme.jcs_lower_escapes fixes that in JSON text written by
-- to_json: every backslash there starts an escape, so hiding each \\ pair first (as
-- NUL, which to_json never leaves raw) leaves only real escapes to lowercase. It is
-- idempotent, so a record may apply it to node states that already had it applied.
CREATE OR REPLACE MACRO prme.jcs_lower_escapes(json_text) AS
    replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(json_text, '\\', chr(0)),
        '\u000B', '\u000b'),
        '\u000E', '\u000e'),
        '\u000F', '\u000f'),
        '\u001A', '\u001a'),
        '\u001B', '\u001b'),
        '\u001C', '\u001c'),
        '\u001D', '\u001d'),
        '\u001E', '\u001e'),
        '\u001F', '\u001f'),
        chr(0), '\\');

CREATE OR REPLACE MACRO prme.json_string(string) AS
prme.jcs_lower_escapes(CAST(to_json(CAST(string AS VARCHAR)) AS VARCHAR));

-- A node state as one to_json of a STRUCT whose fields are in RFC 8785 key order
-- (all ASCII, so code-unit order is byte order): DuckDB binds one function instead
-- of a long concatenation, which keeps every call that builds a record fast.
-- Numbers go in as JSON text (trim_scale: 0.6500 -> 0.65, 1.0000 -> 1), times as
-- strings; a NULL time becomes null. Without the escape fix-up (see node_state).
CREATE OR REPLACE MACRO prme.node_state_unfixed(node) AS
CAST(to_json({
    'confidence_base': CAST(prme.trim_scale(node.confidence_base) AS JSON),
    'content': CAST(node.content AS VARCHAR),
    'created_at': prme.utc_text(node.created_at),
    'decay_profile': CAST(node.decay_profile AS VARCHAR),
    'evidence_refs': CAST(node.evidence_refs AS UUID []),
    'id': CAST(node.id AS UUID),
    'kind': CAST(node.kind AS VARCHAR),
    'last_reinforced_at': prme.utc_text(node.last_reinforced_at),
    'lifecycle_state': CAST(node.lifecycle_state AS VARCHAR),
    'namespace': CAST(node.namespace AS VARCHAR),
    'next_review_at': prme.utc_text(node.next_review_at),
    'reinforcement_boost': CAST(prme.trim_scale(node.reinforcement_boost) AS JSON),
    'salience_base': CAST(prme.trim_scale(node.salience_base) AS JSON),
    'scope': CAST(node.scope AS VARCHAR),
    'stability': CAST(node.stability AS VARCHAR),
    'updated_at': prme.utc_text(node.updated_at),
    'user_id': CAST(node.user_id AS VARCHAR),
    'version': CAST(node.version AS BIGINT)
}) AS VARCHAR);

-- prme._node_state: every column but the derived last_checksum, RFC 8785 canonical.
CREATE OR REPLACE MACRO prme.node_state(node) AS
prme.jcs_lower_escapes(prme.node_state_unfixed(node));

-- prme._journal_record_v2. The two states are embedded as given (they are JSON text
-- already); the other fields are one to_json of a STRUCT in key order, spliced in
-- after them. || (not concat) so that a NULL after_state gives NULL, as in PostgreSQL.
CREATE OR REPLACE MACRO prme.journal_record_v2(
    op, policy, operation_id, request_id, user_id, node_id, evidence_id,
    before_state, after_state, prev_checksum, recorded_at
) AS
prme.jcs_lower_escapes(
    '{"after":' || after_state
    || ',"before":' || coalesce(before_state, 'null')
    || ',' || substr(CAST(to_json({
        'evidence_id': CAST(evidence_id AS UUID),
        'node_id': CAST(node_id AS UUID),
        'op': CAST(op AS VARCHAR),
        'operation_id': CAST(operation_id AS UUID),
        'policy': CAST(policy AS VARCHAR),
        'prev_checksum': CAST(prev_checksum AS VARCHAR),
        'recorded_at': prme.utc_text(recorded_at),
        'request_id': CAST(request_id AS UUID),
        'user_id': CAST(user_id AS VARCHAR),
        'version': 2
    }) AS VARCHAR), 2)
);

-- +0.15 up to a cap of 0.5; a value already above the cap is kept, never reduced.
CREATE OR REPLACE MACRO prme.reinforced_boost(boost) AS
CAST(greatest(boost, least(boost + 0.15, 0.5)) AS DECIMAL(5, 4));

-- +0.05 up to a cap of 0.95; a value already above the cap is kept, never reduced.
CREATE OR REPLACE MACRO prme.reinforced_confidence(confidence) AS
CAST(greatest(confidence, least(confidence + 0.05, 0.95)) AS DECIMAL(5, 4));

-- docs/DESIGN.md section 3, step 5: caps that never reduce, both timestamps set to now,
-- the evidence appended (never de-duplicated), version + 1. Every other field,
-- salience_base included, is kept. struct_update keeps the fields' order and types.
CREATE OR REPLACE MACRO prme.reinforced(node, evidence_id, now) AS
struct_update(
    node,
    confidence_base := prme.reinforced_confidence(node.confidence_base),
    reinforcement_boost := prme.reinforced_boost(node.reinforcement_boost),
    last_reinforced_at := CAST(now AS TIMESTAMPTZ),
    evidence_refs := CASE
        WHEN evidence_id IS NULL THEN node.evidence_refs
        ELSE list_append(node.evidence_refs, CAST(evidence_id AS UUID))
    END,
    updated_at := CAST(now AS TIMESTAMPTZ),
    version := CAST(node.version + 1 AS BIGINT)
);

CREATE OR REPLACE MACRO prme.archived(node, now) AS
struct_update(
    node,
    lifecycle_state := 'archived',
    updated_at := CAST(now AS TIMESTAMPTZ),
    version := CAST(node.version + 1 AS BIGINT)
);

-- A node state read back from a journal record (JSON) as a STRUCT in column order.
CREATE OR REPLACE MACRO prme.parse_state(state) AS
json_transform(state, '{"id":"UUID","user_id":"VARCHAR","namespace":"VARCHAR","scope":"VARCHAR",'
    || '"kind":"VARCHAR","content":"VARCHAR","confidence_base":"DECIMAL(5,4)",'
    || '"salience_base":"DECIMAL(5,4)","reinforcement_boost":"DECIMAL(5,4)",'
    || '"last_reinforced_at":"TIMESTAMPTZ","evidence_refs":["UUID"],"stability":"VARCHAR",'
    || '"next_review_at":"TIMESTAMPTZ","lifecycle_state":"VARCHAR","decay_profile":"VARCHAR",'
    || '"created_at":"TIMESTAMPTZ","updated_at":"TIMESTAMPTZ","version":"BIGINT"}');

-- Virtual decay (sql/postgres/300_effective_decay.sql): ranking scores in DOUBLE, never
-- written and never in a checksum, computed with the same operations in the same order
-- as PostgreSQL so that both engines rank alike to the last bit (docs/RECALL.md).
CREATE OR REPLACE MACRO prme.decay_rate(decay_profile) AS
CASE decay_profile
    WHEN 'permanent' THEN CAST(0.0 AS DOUBLE)
    WHEN 'slow' THEN CAST(0.005 AS DOUBLE)
    WHEN 'medium' THEN CAST(0.02 AS DOUBLE)
    WHEN 'fast' THEN CAST(0.07 AS DOUBLE)
    WHEN 'rapid' THEN CAST(0.2 AS DOUBLE)
END;

CREATE OR REPLACE MACRO prme.decay_factor(rate, age_days) AS
CASE WHEN rate * age_days >= CAST(700.0 AS DOUBLE) THEN CAST(0.0 AS DOUBLE) ELSE exp(-(rate * age_days)) END;

-- PostgreSQL's date_part('epoch', as_of - reference) / 86400: the difference is an
-- interval of whole days plus a time of day (justify_hours), and its epoch is
-- time / 1e6 + days * 86400, added in DOUBLE. Negative ages are 0 either way.
CREATE OR REPLACE MACRO prme.age_days(reference, as_of) AS
greatest(
    CAST(0.0 AS DOUBLE),
    (
        CAST((epoch_us(CAST(as_of AS TIMESTAMPTZ)) - epoch_us(CAST(reference AS TIMESTAMPTZ))) % 86400000000 AS DOUBLE)
        / CAST(1000000.0 AS DOUBLE)
        + CAST(
            ((epoch_us(CAST(as_of AS TIMESTAMPTZ)) - epoch_us(CAST(reference AS TIMESTAMPTZ))) // 86400000000) * 86400
            AS DOUBLE
        )
    ) / CAST(86400.0 AS DOUBLE)
);

CREATE OR REPLACE MACRO prme.effective_salience(salience_base, reinforcement_boost, decay_profile, age_days) AS
least(
    CAST(1.0 AS DOUBLE),
    greatest(
        CAST(0.0 AS DOUBLE),
        CAST(salience_base AS DOUBLE) * prme.decay_factor(prme.decay_rate(decay_profile), age_days)
        + CAST(reinforcement_boost AS DOUBLE) * prme.decay_factor(CAST(0.10 AS DOUBLE), age_days)
    )
);

CREATE OR REPLACE MACRO prme.effective_confidence(confidence_base, decay_profile, age_days) AS
least(
    CAST(1.0 AS DOUBLE),
    greatest(
        CAST(0.0 AS DOUBLE),
        CAST(confidence_base AS DOUBLE)
        * prme.decay_factor(prme.decay_rate(decay_profile) / CAST(2.0 AS DOUBLE), age_days)
    )
);

-- Recall's words (sql/postgres/040_nodes.sql, prme._recall_words; docs/RECALL.md, "Words"):
-- the same runs, stop words, length limit and plural endings, so both engines match and
-- rank alike. The separators are PostgreSQL's class spelled for RE2.
CREATE OR REPLACE MACRO prme.stop_words() AS [
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
];

CREATE OR REPLACE MACRO prme.recall_stem(token) AS
CASE
    WHEN length(token) < 4 THEN token
    WHEN token LIKE '%ies' AND token NOT LIKE '%eies' AND token NOT LIKE '%aies'
        THEN substr(token, 1, length(token) - 3) || 'y'
    WHEN token LIKE '%es' AND token NOT LIKE '%aes' AND token NOT LIKE '%ees' AND token NOT LIKE '%oes'
        THEN substr(token, 1, length(token) - 1)
    WHEN token LIKE '%s' AND token NOT LIKE '%us' AND token NOT LIKE '%ss'
        THEN substr(token, 1, length(token) - 1)
    ELSE token
END;

CREATE OR REPLACE MACRO prme.recall_words(content) AS
list_sort(list_distinct(list_transform(
    list_filter(
        regexp_split_to_array(
            translate(content, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'),
            '[\x01-\x2f\x3a-\x40\x5b-\x60\x7b-\x{bf}\x{d7}\x{f7}\x{2000}-\x{206f}\x{3000}-\x{303f}\x{feff}]+'
        ),
        lambda t: t <> '' AND length(t) <= 100 AND NOT list_contains(prme.stop_words(), t)
    ),
    lambda t: prme.recall_stem(t)
)));

-- =============================================================================
-- prme-pg DuckDB port: verify_journal and replay_node
--
-- Table macros answering like prme.verify_journal and prme.replay_node of
-- sql/postgres/060_journal.sql and 130_replay_node.sql: same problems, same
-- details, same order. PL/pgSQL walks each chain in a loop; here each record
-- is judged against its predecessor with window functions, which is the same
-- thing because a chain is only ever compared link by link.
-- =============================================================================

CREATE OR REPLACE MACRO prme.verify_journal(p_user_id) AS TABLE
WITH entries AS (
    SELECT
        j.*,
        CASE WHEN json_valid(j.record) AND json_type(j.record) = 'OBJECT' THEN CAST(j.record AS JSON) END AS doc,
        lag(j.checksum) OVER chain AS prev_record_checksum,
        coalesce(lag(j.node_version) OVER chain + 1, 1) AS expected_version
    FROM prme.journal AS j
    WHERE j.user_id = p_user_id
    WINDOW chain AS (PARTITION BY j.node_id ORDER BY j.node_version)
),

linked AS (
    -- The after of the previous record that parsed (a missing after counts as null).
    SELECT
        e.*,
        coalesce(
            last_value(CASE WHEN e.doc IS NOT NULL THEN coalesce(e.doc -> 'after', CAST('null' AS JSON)) END IGNORE NULLS)
                OVER (PARTITION BY e.node_id ORDER BY e.node_version ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
            CAST('null' AS JSON)
        ) AS prev_after
    FROM entries AS e
),

problems AS (
    SELECT
        node_id, node_version, 1 AS rank, 'checksum_mismatch' AS problem,
        'sha256 of the stored record text differs from the stored checksum' AS detail
    FROM linked WHERE sha256(record) <> checksum
    UNION ALL
    SELECT node_id, node_version, 2, 'malformed_record', 'the stored record text is not a JSON object'
    FROM linked WHERE doc IS NULL
    UNION ALL
    SELECT node_id, node_version, 3, 'column_mismatch', 'a column of the journal row disagrees with its record'
    FROM linked
    WHERE doc IS NOT NULL AND (
        (doc ->> 'node_id') IS DISTINCT FROM CAST(node_id AS VARCHAR)
        OR (doc ->> 'user_id') IS DISTINCT FROM user_id
        OR (doc ->> 'op') IS DISTINCT FROM op
        OR (doc ->> 'version') IS DISTINCT FROM CAST(record_version AS VARCHAR)
        OR (doc ->> 'operation_id') IS DISTINCT FROM CAST(operation_id AS VARCHAR)
        OR (doc ->> 'evidence_id') IS DISTINCT FROM CAST(evidence_id AS VARCHAR)
        OR (doc -> 'after' ->> 'version') IS DISTINCT FROM CAST(node_version AS VARCHAR)
        OR (record_version = 2 AND (
            (doc ->> 'request_id') IS DISTINCT FROM CAST(request_id AS VARCHAR)
            OR (doc ->> 'prev_checksum') IS DISTINCT FROM prev_checksum
            OR key_namespace IS DISTINCT FROM CASE WHEN request_id IS NOT NULL THEN doc -> 'after' ->> 'namespace' END))
    )
    UNION ALL
    SELECT node_id, node_version, 4, 'continuity_break', 'before differs from the after of the previous record of this node'
    FROM linked WHERE doc IS NOT NULL AND (doc -> 'before') IS DISTINCT FROM prev_after
    UNION ALL
    SELECT node_id, node_version, 5, 'version_gap', 'expected node version ' || expected_version
    FROM linked WHERE node_version <> expected_version
    UNION ALL
    SELECT
        node_id, node_version, 6, 'chain_break',
        'prev_checksum ' || coalesce(prev_checksum, 'null') || ' does not name the previous record '
        || coalesce(prev_record_checksum, 'null')
    FROM linked WHERE record_version = 2 AND prev_checksum IS DISTINCT FROM prev_record_checksum
),

heads AS (
    -- The head of each chain must be the record the node row points at; this
    -- catches a deleted newest record, which no later link would reveal.
    SELECT
        n.id AS node_id, n.version AS node_version, 'head_mismatch' AS problem,
        'node points at ' || n.last_checksum || ', newest record is ' || coalesce(h.checksum, 'missing') AS detail
    FROM prme.nodes AS n
    LEFT JOIN (
        SELECT j.node_id, j.checksum, j.node_version
        FROM prme.journal AS j
        WHERE j.user_id = p_user_id
        QUALIFY row_number() OVER (PARTITION BY j.node_id ORDER BY j.node_version DESC) = 1
    ) AS h ON h.node_id = n.id
    WHERE n.user_id = p_user_id
      AND (h.checksum IS DISTINCT FROM n.last_checksum OR h.node_version IS DISTINCT FROM n.version)
),

orphans AS (
    -- Records whose node row is gone, reported at the newest record.
    SELECT
        j.node_id, max(j.node_version) AS node_version, 'node_missing' AS problem,
        'no node row for its ' || count(*) || ' journal record(s)' AS detail
    FROM prme.journal AS j
    WHERE j.user_id = p_user_id
      AND NOT EXISTS (SELECT 1 FROM prme.nodes AS n WHERE n.user_id = j.user_id AND n.id = j.node_id)
    GROUP BY j.node_id
)

SELECT node_id, node_version, problem, detail
FROM (
    SELECT node_id, node_version, problem, detail, 0 AS section, rank FROM problems
    UNION ALL
    SELECT node_id, node_version, problem, detail, 1, 0 FROM heads
    UNION ALL
    SELECT node_id, node_version, problem, detail, 2, 0 FROM orphans
)
ORDER BY section, node_id, node_version, rank;

CREATE OR REPLACE MACRO prme.replay_node(p_user_id, p_node_id) AS TABLE
WITH stored AS (
    SELECT CAST(prme.node_state(n) AS JSON) AS state
    FROM prme.nodes AS n
    WHERE n.user_id = p_user_id AND n.id = p_node_id
),

steps AS (
    -- state: what replaying the records before this one produced (the previous after).
    SELECT
        row_number() OVER (ORDER BY j.node_version) AS position,
        CASE WHEN json_valid(j.record) THEN CAST(j.record AS JSON) END AS doc,
        lag(CASE WHEN json_valid(j.record) THEN CAST(j.record AS JSON) -> 'after' END)
            OVER (ORDER BY j.node_version) AS state
    FROM prme.journal AS j
    WHERE j.user_id = p_user_id AND j.node_id = p_node_id
),

judged AS (
    SELECT
        s.*,
        CASE
            WHEN s.doc IS NULL THEN 'record ' || s.position || ' is not valid JSON'
            WHEN (s.doc -> 'before') IS DISTINCT FROM coalesce(s.state, CAST('null' AS JSON))
                THEN 'record ' || s.position || ': before differs from the state replayed so far'
            WHEN (s.doc ->> 'op') = 'reinforce' AND (s.doc ->> 'policy') = 'additive_caps_v1'
                AND (s.state IS NULL OR prme.reinforced(
                    prme.parse_state(s.state),
                    CASE WHEN json_type(s.doc -> 'evidence_id') = 'VARCHAR'
                        THEN TRY_CAST(s.doc ->> 'evidence_id' AS UUID) END,
                    TRY_CAST(s.doc ->> 'recorded_at' AS TIMESTAMPTZ)
                ) IS DISTINCT FROM prme.parse_state(s.doc -> 'after'))
                THEN 'record ' || s.position || ': after does not follow from before under additive_caps_v1'
        END AS problem
    FROM steps AS s
),

outcome AS (
    SELECT
        coalesce(
            (SELECT min(position) FROM judged WHERE problem IS NOT NULL),
            (SELECT count(*) FROM judged)
        ) AS records,
        (SELECT problem FROM judged WHERE problem IS NOT NULL ORDER BY position LIMIT 1) AS problem,
        CASE
            WHEN EXISTS (SELECT 1 FROM judged WHERE problem IS NOT NULL)
                THEN (SELECT state FROM judged WHERE problem IS NOT NULL ORDER BY position LIMIT 1)
            ELSE (SELECT doc -> 'after' FROM judged ORDER BY position DESC LIMIT 1)
        END AS replayed
)

SELECT
    CAST(o.records AS INTEGER) AS records,
    coalesce(o.problem IS NULL AND o.replayed IS NOT NULL
        AND prme.parse_state(o.replayed) IS NOT DISTINCT FROM prme.parse_state(s.state), FALSE) AS matches,
    coalesce(o.problem, CASE
        WHEN o.replayed IS NULL THEN 'no journal records'
        WHEN prme.parse_state(o.replayed) IS DISTINCT FROM prme.parse_state(s.state)
            THEN 'stored row differs from replay'
    END) AS problem,
    s.state AS stored,
    o.replayed AS replayed
FROM stored AS s, outcome AS o;

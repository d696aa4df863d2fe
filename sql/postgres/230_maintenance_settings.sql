-- =============================================================================
-- prme-pg: maintenance settings (review cadences and decay per cycle)
--
-- How often a memory of each stability should be reviewed, and how much
-- confidence it loses per review cycle it stays overdue:
--   low           every  7 days, -0.15 per overdue cycle
--   semi-stable   every 30 days, -0.15
--   stable        every 90 days, -0.05
-- The table is keyed by owner like every other table (so it distributes and
-- colocates by user_id): the rows of the reserved owner '*' are the defaults, and
-- an owner's own row for a stability overrides them. Owners set overrides with
-- prme.set_maintenance_setting; the defaults are changed by the database owner
-- (UPDATE ... WHERE user_id = '*'), never through the API.
-- Cadences are elapsed time in whole seconds (days of 24 hours, no months), so
-- due dates do not depend on the session's TimeZone and cycle counts are exact.
-- =============================================================================

CREATE TABLE prme.maintenance_settings (
    user_id text NOT NULL,
    stability text NOT NULL CHECK (stability IN ('low', 'semi-stable', 'stable')),
    review_cadence interval NOT NULL CHECK (
        review_cadence >= interval '1 hour' AND review_cadence <= interval '3650 days'
        AND date_part('month', review_cadence) = 0 AND date_part('year', review_cadence) = 0
        AND date_trunc('second', review_cadence) = review_cadence
    ),
    decay_per_cycle numeric(5, 4) NOT NULL CHECK (decay_per_cycle BETWEEN 0 AND 1),
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (user_id, stability)
);

COMMENT ON TABLE prme.maintenance_settings IS
'Review cadence and decay per overdue cycle for each stability. Rows of user_id ''*'' are the defaults; an owner''s '
'row overrides the default for that stability. See docs/MAINTENANCE.md.';

INSERT INTO prme.maintenance_settings (user_id, stability, review_cadence, decay_per_cycle) VALUES
('*', 'low', interval '7 days', 0.15),
('*', 'semi-stable', interval '30 days', 0.15),
('*', 'stable', interval '90 days', 0.05);

-- Readers: prme_reader the rows of the owners bound to it, prme_auditor every row
-- (015_reader_bindings.sql). The '*' rows belong to no owner: a reader bound to
-- an owner sees that owner's overrides, not the defaults.
ALTER TABLE prme.maintenance_settings ENABLE ROW LEVEL SECURITY;
GRANT SELECT ON prme.maintenance_settings TO prme_reader, prme_auditor;
CREATE POLICY maintenance_settings_reader_owner ON prme.maintenance_settings FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY maintenance_settings_auditor_all ON prme.maintenance_settings FOR SELECT TO prme_auditor USING (TRUE);

CREATE FUNCTION prme._maintenance_setting(user_id text, stability text)
RETURNS prme.maintenance_settings
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_setting prme.maintenance_settings;
BEGIN
    SELECT s.* INTO v_setting
    FROM prme.maintenance_settings AS s
    WHERE s.user_id IN (_maintenance_setting.user_id, '*') AND s.stability = _maintenance_setting.stability
    ORDER BY s.user_id = '*'
    LIMIT 1;
    RETURN v_setting;
END;
$$;

COMMENT ON FUNCTION prme._maintenance_setting(text, text) IS
'Internal: the effective setting of user_id for a stability: the owner''s row, else the default (''*'') row.';

-- SQL-standard body, no SET clause: bound to its objects when created and inlined
-- into the calling query (the maintenance report calls it once per memory).
CREATE FUNCTION prme._plus_cadence(t timestamptz, cadence interval)
RETURNS timestamptz
LANGUAGE sql
STABLE
PARALLEL SAFE
RETURN t + interval '1 second' * pg_catalog.date_part('epoch', cadence);

COMMENT ON FUNCTION prme._plus_cadence(timestamptz, interval) IS
'Internal: t plus a cadence as elapsed time (a day is 86400 seconds whatever the TimeZone).';

-- What the settings functions return: one row per stability.
CREATE TYPE prme.maintenance_setting_view AS (
    stability text,
    review_cadence interval,
    decay_per_cycle numeric,
    source text
);

COMMENT ON TYPE prme.maintenance_setting_view IS
'An effective maintenance setting: stability, review_cadence, decay_per_cycle, and source (owner or default).';

CREATE FUNCTION prme.get_maintenance_settings(user_id text)
RETURNS SETOF prme.maintenance_setting_view
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(get_maintenance_settings.user_id);
BEGIN
    RETURN QUERY
    SELECT DISTINCT ON (s.stability)
        s.stability,
        s.review_cadence,
        s.decay_per_cycle::numeric,
        CASE WHEN s.user_id = '*' THEN 'default' ELSE 'owner' END
    FROM prme.maintenance_settings AS s
    WHERE s.user_id IN (v_user_id, '*')
    ORDER BY s.stability, s.user_id = '*';
END;
$$;

COMMENT ON FUNCTION prme.get_maintenance_settings(text) IS
'The effective review cadence and decay per overdue cycle of user_id for each stability, and whether each comes '
'from the owner''s override or the default.';

CREATE FUNCTION prme.set_maintenance_setting(
    user_id text,
    stability text,
    review_cadence interval,
    decay_per_cycle numeric
)
RETURNS SETOF prme.maintenance_setting_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(set_maintenance_setting.user_id);
    v_decay numeric := prme._valid_fraction('decay_per_cycle', set_maintenance_setting.decay_per_cycle);
BEGIN
    IF v_user_id = '*' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'user_id ''*'' names the defaults, which only the database owner changes';
    END IF;
    IF set_maintenance_setting.stability IS NULL
       OR set_maintenance_setting.stability NOT IN ('low', 'semi-stable', 'stable') THEN
        RAISE EXCEPTION USING ERRCODE = 'PR422', MESSAGE = 'stability must be low, semi-stable or stable';
    END IF;
    IF set_maintenance_setting.review_cadence IS NULL
       OR NOT (set_maintenance_setting.review_cadence >= interval '1 hour'
               AND set_maintenance_setting.review_cadence <= interval '3650 days')
       OR date_part('month', set_maintenance_setting.review_cadence) <> 0
       OR date_part('year', set_maintenance_setting.review_cadence) <> 0
       OR date_trunc('second', set_maintenance_setting.review_cadence) <> set_maintenance_setting.review_cadence THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'review_cadence must be between 1 hour and 3650 days, in whole days, hours, minutes or seconds',
            DETAIL = format('got %s', coalesce(set_maintenance_setting.review_cadence::text, 'NULL'));
    END IF;

    INSERT INTO prme.maintenance_settings AS s (user_id, stability, review_cadence, decay_per_cycle, updated_at)
    VALUES (v_user_id, set_maintenance_setting.stability, set_maintenance_setting.review_cadence, v_decay, now())
    ON CONFLICT (user_id, stability) DO UPDATE SET
        review_cadence = excluded.review_cadence,
        decay_per_cycle = excluded.decay_per_cycle,
        updated_at = excluded.updated_at;

    RETURN QUERY SELECT * FROM prme.get_maintenance_settings(v_user_id);
END;
$$;

COMMENT ON FUNCTION prme.set_maintenance_setting(text, text, interval, numeric) IS
'Sets user_id''s own review cadence and decay per overdue cycle for one stability (overriding the default) and '
'returns the effective settings. Cadence: 1 hour to 3650 days, no months; decay: [0, 1], 4 decimals. PR422 '
'otherwise, and for user_id ''*'' (the defaults).';

CREATE FUNCTION prme.reset_maintenance_settings(user_id text)
RETURNS SETOF prme.maintenance_setting_view
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_user_id text := prme._valid_user_id(reset_maintenance_settings.user_id);
BEGIN
    IF v_user_id = '*' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'PR422',
            MESSAGE = 'user_id ''*'' names the defaults, which only the database owner changes';
    END IF;
    DELETE FROM prme.maintenance_settings AS s WHERE s.user_id = v_user_id;
    RETURN QUERY SELECT * FROM prme.get_maintenance_settings(v_user_id);
END;
$$;

COMMENT ON FUNCTION prme.reset_maintenance_settings(text) IS
'Removes user_id''s overrides, so the defaults apply again, and returns the effective settings.';

REVOKE ALL ON FUNCTION prme.get_maintenance_settings(text) FROM public;
GRANT EXECUTE ON FUNCTION prme.get_maintenance_settings(text) TO prme_app;
REVOKE ALL ON FUNCTION prme.set_maintenance_setting(text, text, interval, numeric) FROM public;
GRANT EXECUTE ON FUNCTION prme.set_maintenance_setting(text, text, interval, numeric) TO prme_app;
REVOKE ALL ON FUNCTION prme.reset_maintenance_settings(text) FROM public;
GRANT EXECUTE ON FUNCTION prme.reset_maintenance_settings(text) TO prme_app;

-- =============================================================================
-- prme-pg: domains (the rules of a memory's and a journal record's values)
--
-- The value rules of prme.nodes and prme.journal live on their types, not in
-- table CHECK constraints. PostgreSQL evaluates every CHECK constraint of a table
-- on every INSERT and UPDATE of a row, and before it can, it reads each one back
-- from its stored text and plans it, once per statement: for the two rows a
-- confirmation writes that was half of the cost of the writes themselves
-- (docs/PERFORMANCE.md, "Row rules"). A domain's check is planned once per session
-- and runs only where a value of the domain is written: an UPDATE checks the
-- columns it sets, an INSERT every column. Same rules, same SQLSTATE (23514).
-- =============================================================================

-- namespace, scope, kind: a lowercase name, as prme._valid_name requires of arguments.
CREATE DOMAIN prme.slug AS text
CONSTRAINT slug_check CHECK (value ~ '^[a-z][a-z0-9_-]{0,62}$');

COMMENT ON DOMAIN prme.slug IS
'A lowercase name: a letter, then up to 62 letters, digits, _ or -. namespace, scope and kind of a memory.';

-- Checksums and chain links. Not a regular expression: a bounded repetition such as
-- {64} makes PostgreSQL's matcher about five times slower than this on every write.
-- (Not named sha256_hex: a type's array type is its name with a leading underscore,
-- and prme._sha256_hex('text') would then be read as a cast to that array type.)
CREATE DOMAIN prme.sha256_digest AS text
CONSTRAINT sha256_digest_check CHECK (length(value) = 64 AND ltrim(value, '0123456789abcdef') = '');

COMMENT ON DOMAIN prme.sha256_digest IS
'A sha256 digest as 64 lowercase hexadecimal digits.';

-- Confidence, salience and boost: exact decimals with four places, from 0 to 1.
CREATE DOMAIN prme.unit_interval AS numeric(5, 4)
CONSTRAINT unit_interval_check CHECK (value BETWEEN 0 AND 1);

COMMENT ON DOMAIN prme.unit_interval IS
'A numeric(5,4) from 0 to 1: confidence_base, salience_base and reinforcement_boost of a memory.';

CREATE DOMAIN prme.stability AS text
CONSTRAINT stability_check CHECK (value IN ('low', 'semi-stable', 'stable'));

COMMENT ON DOMAIN prme.stability IS
'How settled a memory is: low, semi-stable or stable.';

CREATE DOMAIN prme.lifecycle_state AS text
CONSTRAINT lifecycle_state_check CHECK (value IN ('active', 'contested', 'superseded', 'deprecated', 'archived'));

COMMENT ON DOMAIN prme.lifecycle_state IS
'Where a memory is in its life: active, contested, superseded, deprecated or archived.';

CREATE DOMAIN prme.decay_profile AS text
CONSTRAINT decay_profile_check CHECK (value IN ('permanent', 'slow', 'medium', 'fast', 'rapid'));

COMMENT ON DOMAIN prme.decay_profile IS
'How fast a memory''s confidence decays between reviews: permanent, slow, medium, fast or rapid.';

-- evidence_refs: appended in order, never de-duplicated, never a NULL element.
CREATE DOMAIN prme.uuid_list AS uuid[]
CONSTRAINT uuid_list_check CHECK (array_position(value, NULL) IS NULL);

COMMENT ON DOMAIN prme.uuid_list IS
'An ordered list of uuids without NULL elements (a memory''s evidence_refs).';

CREATE DOMAIN prme.version_number AS bigint
CONSTRAINT version_number_check CHECK (value > 0);

COMMENT ON DOMAIN prme.version_number IS
'A memory''s version, from 1 (its creation); each mutation adds one.';

CREATE DOMAIN prme.counter AS bigint
CONSTRAINT counter_check CHECK (value >= 0);

COMMENT ON DOMAIN prme.counter IS
'A count of events, never negative.';

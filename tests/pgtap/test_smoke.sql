BEGIN;
SELECT plan(2);
SELECT has_schema('prme');
SELECT has_function('prme', 'reinforce', ARRAY['uuid', 'text', 'uuid', 'uuid']);
SELECT * FROM finish();
ROLLBACK;

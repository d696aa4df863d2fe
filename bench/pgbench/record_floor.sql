-- g. function_floor plus what the journal's rule requires of any design: read the node
-- and build its record (both states, canonical text, sha256) in the transaction, with the
-- engine's own builder. No validation, no key, no evidence check: the floor under
-- reinforce for this engine. The function is bench.read_build_write (bench/run.py,
-- SETUP_SQL). Variables: see reinforce_fresh.sql.
\set i random(1, :nodes)
\set u :i % :owners
\sleep :rtt us
SELECT * FROM bench.read_build_write(
    node_id => md5('node:' || :i::text)::uuid,
    user_id => 'user_' || :u::text
);

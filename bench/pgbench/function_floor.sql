-- f. What any API function that makes these two writes costs at least: no_logic_limit's
-- statement, unchanged, inside a function made the way the API's functions must be
-- (PL/pgSQL, SECURITY DEFINER, search_path pinned; docs/DESIGN.md, "Security"),
-- returning the node as reinforce does. Its record and checksum are handed to it
-- (-D record=..., -D checksum=...): it reads nothing, checks no key, builds and hashes
-- nothing. reinforce does all of that besides, so fresh / no_logic_limit cannot exceed
-- function_floor / no_logic_limit, nor can fresh CPU go below function_floor's.
-- The function is bench.two_writes (bench/run.py, SETUP_SQL). Variables: see reinforce_fresh.sql.
\set i random(1, :nodes)
\set u :i % :owners
\sleep :rtt us
SELECT * FROM bench.two_writes(
    node_id => md5('node:' || :i::text)::uuid,
    user_id => 'user_' || :u::text,
    record => :record,
    checksum => :checksum
);

-- c. prme.add_node of a new memory with its 256-dimension vector, for a random owner.
-- Variables (set by bench/schema_cost_bench.py with -D): owners. The model 'bench-256' is
-- registered by the first vector stored. rtt: microseconds of emulated network round trip.
\set u random(0, :owners - 1)
\sleep :rtt us
SELECT id FROM prme.add_node(
    user_id => 'user_' || :u::text,
    content => 'a new memory ' || gen_random_uuid()::text,
    embedding => array_fill(0.0625::real, ARRAY[256]),
    embedding_model => 'bench-256'
);

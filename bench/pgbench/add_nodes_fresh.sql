-- n. prme.add_nodes of a batch of 100 new memories (fresh node ids, about 90 characters each,
-- a 256-number vector each, as the default embedder's) of a random owner: what a bulk import
-- sends. Variables (-D): owners. The first batch registers the model (embedding_dimensions).
\set u random(0, :owners - 1)
SELECT count(*) FROM prme.add_nodes(
    'user_' || :u::text,
    (
        SELECT jsonb_agg(jsonb_build_object(
            'content', 'memory ' || i || ' of a bulk import, about editors, tabs and the habits of an owner',
            'node_id', gen_random_uuid(), 'embedding_model', 'bench-256', 'embedding_dimensions', 256
        ))
        FROM generate_series(1, 100) AS i
    ),
    array_fill(0.5::real, ARRAY[100 * 256])
);

-- e. For context: one single-row INSERT per commit into a plain table
-- (user_id text, id uuid, content text; primary key (user_id, id)).
\set u random(0, :owners - 1)
\sleep :rtt us
INSERT INTO bench.single_rows (user_id, id, content)
VALUES ('user_' || :u::text, gen_random_uuid(), 'Benchmark row: the user prefers short answers with code examples');

-- b. prme.reinforce retried with a key that was already committed: node i was
-- reinforced once with request_id md5('key:' || i)::uuid for i in 1..replay_keys
-- (bench/run.py preloads them). A replay returns the current node and writes nothing.
\set i random(1, :replay_keys)
\set u :i % :owners
\sleep :rtt us
SELECT * FROM prme.reinforce(
    node_id => md5('node:' || :i::text)::uuid,
    user_id => 'user_' || :u::text,
    request_id => md5('key:' || :i::text)::uuid
);

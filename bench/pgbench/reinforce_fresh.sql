-- a. prme.reinforce with a fresh idempotency key on a random node of a random owner.
-- Variables (set by bench/run.py with -D): nodes, owners. Node i belongs to owner
-- 'user_' || (i % owners) and has id md5('node:' || i)::uuid (bench/run.py loads them).
-- rtt: microseconds of emulated network round trip before each statement (0: loopback).
\set i random(1, :nodes)
\set u :i % :owners
\sleep :rtt us
SELECT * FROM prme.reinforce(
    node_id => md5('node:' || :i::text)::uuid,
    user_id => 'user_' || :u::text,
    request_id => gen_random_uuid()
);

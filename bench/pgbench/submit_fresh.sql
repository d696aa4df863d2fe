-- s. prme.submit_operation of a new add_node operation (a fresh operation id) of a
-- random owner. Variables (-D): owners. The hash is the payload's (sha256 of its RFC 8785 form).
-- The id is text, as operation ids are since 0017_reference_protocol: compare schemas from 17 on.
\set u random(0, :owners - 1)
SELECT created FROM prme.submit_operation(
    'user_' || :u::text, gen_random_uuid()::text, 2, 'add_node', '{}',
    'ed2b20d6663e94cece86e395c4f4ad56a5666ec91034b3db9c3f8a1af4c734de',
    '{"content": "The user prefers short answers with code examples", "kind": "preference", "confidence_base": 0.7}'
);

-- l. A long memory through the ledger: prme.submit_operation of a new add_node of 260 words with
-- token_budget 20 (13 parts) for a random owner, then one executor call, which plans, validates
-- and commits the oldest ready one (a client may commit another client's). Variables (-D): owners.
\set u random(0, :owners - 1)
SELECT created FROM prme.submit_operation(
    'user_' || :u::text, gen_random_uuid()::text, 2, 'add_node', '{}',
    'a4c68a6a8c8d24428b690f71d307cae46db37ce8da052c2307a3a01a23f82234',
    '{"content": "the user wrote line 0 of a long meeting note about the roadmap the user wrote line 1 of a long meeting note about the roadmap the user wrote line 2 of a long meeting note about the roadmap the user wrote line 3 of a long meeting note about the roadmap the user wrote line 4 of a long meeting note about the roadmap the user wrote line 5 of a long meeting note about the roadmap the user wrote line 6 of a long meeting note about the roadmap the user wrote line 7 of a long meeting note about the roadmap the user wrote line 8 of a long meeting note about the roadmap the user wrote line 9 of a long meeting note about the roadmap the user wrote line 10 of a long meeting note about the roadmap the user wrote line 11 of a long meeting note about the roadmap the user wrote line 12 of a long meeting note about the roadmap the user wrote line 13 of a long meeting note about the roadmap the user wrote line 14 of a long meeting note about the roadmap the user wrote line 15 of a long meeting note about the roadmap the user wrote line 16 of a long meeting note about the roadmap the user wrote line 17 of a long meeting note about the roadmap the user wrote line 18 of a long meeting note about the roadmap the user wrote line 19 of a long meeting note about the roadmap", "token_budget": 20}'
);
SELECT count(*) FROM prme.run_operations(1, 'bench', 1000);

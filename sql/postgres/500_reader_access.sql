-- =============================================================================
-- prme-pg: what prme_reader reads beyond the core tables
--
-- 135 lets prme_reader read nodes, events and the journal of the owners bound to
-- the reading role (prme.reader_bindings), and prme_auditor every owner's. The
-- same holds for every owner's table added since: outcome events, the correction
-- inbox, the owners' own maintenance settings (not the
-- '*' defaults), maintenance patches and their ops, prompt snapshots, and the
-- operations ledger. Each table already has row-level security enabled; each gets
-- SELECT for both roles and the same two policies as 135's. Not readable:
-- request_keys (idempotency internals) and api_tokens (credentials).
-- =============================================================================

GRANT SELECT ON
prme.outcomes,
prme.correction_inbox,
prme.maintenance_settings,
prme.maintenance_patches,
prme.patch_ops,
prme.snapshot_generations,
prme.snapshot_heads,
prme.snapshot_history,
prme.operations,
prme.operation_events,
prme.operation_parts
TO prme_reader, prme_auditor;

CREATE POLICY outcomes_reader_owner ON prme.outcomes FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY correction_inbox_reader_owner ON prme.correction_inbox FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY maintenance_settings_reader_owner ON prme.maintenance_settings FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY maintenance_patches_reader_owner ON prme.maintenance_patches FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY patch_ops_reader_owner ON prme.patch_ops FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY snapshot_generations_reader_owner ON prme.snapshot_generations FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY snapshot_heads_reader_owner ON prme.snapshot_heads FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY snapshot_history_reader_owner ON prme.snapshot_history FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY operations_reader_owner ON prme.operations FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY operation_events_reader_owner ON prme.operation_events FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY operation_parts_reader_owner ON prme.operation_parts FOR SELECT TO prme_reader
USING (
    user_id = any(array(
        SELECT b.user_id FROM prme.reader_bindings AS b
        WHERE pg_has_role(b.reader, 'USAGE')
    ))
);
CREATE POLICY outcomes_auditor_all ON prme.outcomes FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY correction_inbox_auditor_all ON prme.correction_inbox FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY maintenance_settings_auditor_all ON prme.maintenance_settings FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY maintenance_patches_auditor_all ON prme.maintenance_patches FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY patch_ops_auditor_all ON prme.patch_ops FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY snapshot_generations_auditor_all ON prme.snapshot_generations FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY snapshot_heads_auditor_all ON prme.snapshot_heads FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY snapshot_history_auditor_all ON prme.snapshot_history FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY operations_auditor_all ON prme.operations FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY operation_events_auditor_all ON prme.operation_events FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY operation_parts_auditor_all ON prme.operation_parts FOR SELECT TO prme_auditor USING (TRUE);

-- =============================================================================
-- prme-pg: what prme_reader reads of outcomes, maintenance and the ledger
--
-- The reader grants and policies of the tables of 200, 210, 260, 410 and 450
-- (015_reader_bindings.sql describes them; every other table's file holds its own).
-- =============================================================================

GRANT SELECT ON
prme.outcomes,
prme.node_maintenance,
prme.maintenance_patches,
prme.patch_ops,
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
CREATE POLICY node_maintenance_reader_owner ON prme.node_maintenance FOR SELECT TO prme_reader
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
CREATE POLICY node_maintenance_auditor_all ON prme.node_maintenance FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY maintenance_patches_auditor_all ON prme.maintenance_patches FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY patch_ops_auditor_all ON prme.patch_ops FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY operations_auditor_all ON prme.operations FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY operation_events_auditor_all ON prme.operation_events FOR SELECT TO prme_auditor USING (TRUE);
CREATE POLICY operation_parts_auditor_all ON prme.operation_parts FOR SELECT TO prme_auditor USING (TRUE);

-- rollsafe:no-transaction
--
-- V5 (example, not shipped): ready rows must name their output collection.
--
-- Added NOT VALID first (a brief ACCESS EXCLUSIVE, no scan: new and
-- updated rows are checked from now on), then validated in its own
-- statement, which scans under SHARE UPDATE EXCLUSIVE and so blocks
-- neither the app's reads nor its writes. In one transaction the scan
-- would run under the ADD's ACCESS EXCLUSIVE.
--
-- The file runs outside a transaction, so each statement must be
-- re-runnable: the constraint is dropped IF EXISTS and added again in the
-- same (atomic) statement, and validating a valid constraint is a no-op.

ALTER TABLE attached_functions
    DROP CONSTRAINT IF EXISTS attached_functions_ready_has_output,
    ADD CONSTRAINT attached_functions_ready_has_output
        CHECK (NOT is_ready OR is_deleted OR output_collection_id IS NOT NULL) NOT VALID;

ALTER TABLE attached_functions
    VALIDATE CONSTRAINT attached_functions_ready_has_output;

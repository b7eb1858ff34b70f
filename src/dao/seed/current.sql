-- Bulk rows shaped like the current app's two-phase create: is_ready is
-- always written explicitly; 1 row in 100 is a creation in flight (phase 1
-- done: not ready, no output collection yet), the rest are finished (ready,
-- with their output collection). Ten functions per input collection.
-- {rows} is the row count.
CREATE TEMP TABLE rollsafe_seed_inputs AS
    SELECT gen_random_uuid() AS id, gen_random_uuid() AS database_id, g AS n
    FROM generate_series(0, ({rows} - 1) / 10) g;
CREATE TEMP TABLE rollsafe_seed_rows AS
    SELECT gen_random_uuid() AS id, gen_random_uuid() AS output_id, g, g % 100 <> 0 AS ready
    FROM generate_series(1, {rows}) g;
INSERT INTO collections (id, name, tenant_id, database_id)
    SELECT id, 'seed_input_' || id, 'tenant_' || (n % 7), database_id
    FROM rollsafe_seed_inputs;
INSERT INTO collections (id, name, tenant_id, database_id)
    SELECT r.output_id, 'seed_output_' || r.id, 'tenant_' || (i.n % 7), i.database_id
    FROM rollsafe_seed_rows r JOIN rollsafe_seed_inputs i ON i.n = (r.g - 1) / 10
    WHERE r.ready;
INSERT INTO attached_functions
    (id, name, tenant_id, database_id, input_collection_id,
     output_collection_name, output_collection_id, function_id, function_params,
     min_records_for_invocation, is_ready)
    SELECT r.id, 'fn_' || r.g, 'tenant_' || (i.n % 7), i.database_id, i.id,
           'fn_' || r.g || '_output', CASE WHEN r.ready THEN r.output_id END,
           (ARRAY(SELECT id FROM functions ORDER BY name))[1 + r.g % (SELECT count(*) FROM functions)],
           jsonb_build_object('seed', r.g), 100 * (1 + r.g % 5), r.ready
    FROM rollsafe_seed_rows r JOIN rollsafe_seed_inputs i ON i.n = (r.g - 1) / 10;
DROP TABLE rollsafe_seed_rows, rollsafe_seed_inputs;

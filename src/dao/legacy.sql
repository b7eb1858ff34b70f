-- app: legacy
-- needs: 2
--
-- The attached-functions queries of the app before readiness (`is_ready`)
-- existed. Its create is one-phase: the output collection and the attached
-- function (with output_collection_id set) are inserted in one transaction,
-- so every row is complete the moment it is visible. It never names
-- `is_ready`: it does not know the column, and on V3 the column's default
-- (true) makes its rows ready. These files are what the verifier replays on
-- V2 and V3 (the legacy app's rollout window).

-- name: insert_collection
INSERT INTO collections (id, name, tenant_id, database_id)
VALUES ($1::uuid, $2::text, $3::text, $4::uuid);

-- name: insert_attached_function
-- param: $5 = (SELECT id FROM collections WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- param: $7 = (SELECT id FROM collections WHERE NOT is_deleted ORDER BY id DESC LIMIT 1)
-- param: $8 = (SELECT id FROM functions ORDER BY id LIMIT 1)
INSERT INTO attached_functions (
    id, name, tenant_id, database_id, input_collection_id,
    output_collection_name, output_collection_id, function_id,
    function_params, min_records_for_invocation)
VALUES ($1::uuid, $2::text, $3::text, $4::uuid, $5::uuid,
        $6::text, $7::uuid, $8::uuid,
        $9::jsonb, $10::bigint);

-- name: get_by_id
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
SELECT id, name, tenant_id, database_id, input_collection_id,
       output_collection_name, output_collection_id, function_id,
       function_params, completion_offset, last_run,
       min_records_for_invocation, current_attempts, is_alive,
       created_at, updated_at
  FROM attached_functions
 WHERE id = $1::uuid AND NOT is_deleted;

-- name: get_by_name
-- param: $1 = (SELECT input_collection_id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- param: $2 = (SELECT name FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
SELECT id, name, tenant_id, database_id, input_collection_id,
       output_collection_name, output_collection_id, function_id,
       function_params, completion_offset, last_run,
       min_records_for_invocation, current_attempts, is_alive,
       created_at, updated_at
  FROM attached_functions
 WHERE input_collection_id = $1::uuid AND name = $2::text AND NOT is_deleted;

-- name: list_by_collection
-- param: $1 = (SELECT input_collection_id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
SELECT id, name, tenant_id, database_id, input_collection_id,
       output_collection_name, output_collection_id, function_id,
       function_params, completion_offset, last_run,
       min_records_for_invocation, current_attempts, is_alive,
       created_at, updated_at
  FROM attached_functions
 WHERE input_collection_id = $1::uuid AND NOT is_deleted
 ORDER BY name;

-- name: detach
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- Soft delete; the rename frees the name under UNIQUE (input_collection_id, name).
UPDATE attached_functions
   SET is_deleted = true,
       name = '_deleted_' || name || '_' || id::text,
       updated_at = now()
 WHERE id = $1::uuid AND NOT is_deleted
RETURNING id;

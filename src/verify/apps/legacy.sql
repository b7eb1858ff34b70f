-- app: legacy
-- needs: 2
--
-- INTERIM (verify branch): the legacy app's statements as the verifier
-- replays them, until src/dao/legacy.sql lands on main; then the verifier
-- replays that file instead and this one is deleted.
-- One-phase create: the output collection and the attached function are
-- written in one transaction, so every row is complete when it is visible.

-- name: create_output_collection
-- param: $3 = (SELECT database_id FROM collections WHERE NOT is_deleted LIMIT 1)
INSERT INTO collections (id, name, tenant_id, database_id)
VALUES ($1, $2, 'tenant', $3);

-- name: insert
-- param: $4 = (SELECT database_id FROM collections WHERE NOT is_deleted LIMIT 1)
-- param: $5 = (SELECT id FROM collections WHERE NOT is_deleted LIMIT 1)
-- param: $7 = (SELECT id FROM collections WHERE NOT is_deleted LIMIT 1)
-- param: $8 = (SELECT id FROM functions LIMIT 1)
-- param: $9 = '{}'
INSERT INTO attached_functions
    (id, name, tenant_id, database_id, input_collection_id,
     output_collection_name, output_collection_id, function_id, function_params)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- name: get_by_id
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted LIMIT 1)
SELECT id, name, tenant_id, database_id, input_collection_id,
       output_collection_name, output_collection_id, function_id,
       function_params, completion_offset, last_run
FROM attached_functions
WHERE id = $1 AND NOT is_deleted;

-- name: get_by_name
-- param: $1 = (SELECT input_collection_id FROM attached_functions WHERE NOT is_deleted LIMIT 1)
-- param: $2 = (SELECT name FROM attached_functions WHERE NOT is_deleted LIMIT 1)
SELECT id, name, output_collection_id
FROM attached_functions
WHERE input_collection_id = $1 AND name = $2 AND NOT is_deleted;

-- name: list_by_collection
-- param: $1 = (SELECT input_collection_id FROM attached_functions WHERE NOT is_deleted LIMIT 1)
SELECT id, name, output_collection_id
FROM attached_functions
WHERE input_collection_id = $1 AND NOT is_deleted
ORDER BY name;

-- name: advance_offset
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted LIMIT 1)
UPDATE attached_functions
SET completion_offset = $2, last_run = now(), updated_at = now()
WHERE id = $1 AND NOT is_deleted;

-- app: current
-- needs: 3
--
-- INTERIM (verify branch): the current app's statements as the verifier
-- replays them, until src/dao/current.sql lands on main; then the verifier
-- replays that file instead and this one is deleted.
-- Two-phase create: insert not ready, backfill, create the output
-- collection and mark ready. Readers see ready rows only.

-- name: insert_not_ready
-- param: $4 = (SELECT database_id FROM collections WHERE NOT is_deleted LIMIT 1)
-- param: $5 = (SELECT id FROM collections WHERE NOT is_deleted LIMIT 1)
-- param: $7 = (SELECT id FROM functions LIMIT 1)
-- param: $8 = '{}'
INSERT INTO attached_functions
    (id, name, tenant_id, database_id, input_collection_id,
     output_collection_name, function_id, function_params, is_ready)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, false)
ON CONFLICT (input_collection_id, name) DO NOTHING
RETURNING id;

-- name: create_output_collection
-- param: $3 = (SELECT database_id FROM collections WHERE NOT is_deleted LIMIT 1)
INSERT INTO collections (id, name, tenant_id, database_id)
VALUES ($1, $2, 'tenant', $3);

-- name: finish
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted LIMIT 1)
-- param: $2 = (SELECT id FROM collections WHERE NOT is_deleted LIMIT 1)
UPDATE attached_functions
SET output_collection_id = COALESCE(output_collection_id, $2),
    is_ready = true, updated_at = now()
WHERE id = $1 AND NOT is_deleted
RETURNING output_collection_id;

-- name: get_by_id
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted LIMIT 1)
SELECT id, name, output_collection_id, is_ready
FROM attached_functions
WHERE id = $1 AND NOT is_deleted AND is_ready;

-- name: get_any_by_id
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted LIMIT 1)
SELECT id, name, output_collection_id, is_ready
FROM attached_functions
WHERE id = $1 AND NOT is_deleted;

-- name: list_by_collection
-- param: $1 = (SELECT input_collection_id FROM attached_functions WHERE NOT is_deleted LIMIT 1)
SELECT id, name, output_collection_id
FROM attached_functions
WHERE input_collection_id = $1 AND NOT is_deleted AND is_ready
ORDER BY name;

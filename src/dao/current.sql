-- app: current
-- needs: 3
--
-- The attached-functions queries of the two-phase app: phase 1 inserts the
-- row not ready, phase 2 (the caller's backfill) runs outside any
-- transaction, phase 3 (`finish`) creates or reuses the output collection
-- and marks the row ready in one transaction.
--
-- Readiness only ever moves forward: `insert_not_ready` is the one statement
-- that writes `is_ready = false` (on a row it creates), `mark_ready` writes
-- true, and nothing else assigns the column. A unit test pins that.

-- name: insert_not_ready
-- param: $5 = (SELECT id FROM collections WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- param: $7 = (SELECT id FROM functions ORDER BY id LIMIT 1)
-- Race-free phase 1: concurrent identical attaches all reach this statement,
-- one inserts, the others get no row back and read the winner's row.
INSERT INTO attached_functions (
    id, name, tenant_id, database_id, input_collection_id,
    output_collection_name, function_id, function_params,
    min_records_for_invocation, is_ready)
VALUES ($1::uuid, $2::text, $3::text, $4::uuid, $5::uuid,
        $6::text, $7::uuid, $8::jsonb, $9::bigint, false)
ON CONFLICT (input_collection_id, name) DO NOTHING
RETURNING id;

-- name: lock_for_finish
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- Serialises concurrent finishes of one row: the second waits here and then
-- sees is_ready = true.
SELECT id, is_ready, output_collection_id, output_collection_name,
       tenant_id, database_id
  FROM attached_functions
 WHERE id = $1::uuid AND NOT is_deleted
   FOR UPDATE;

-- name: find_output_collection
-- param: $1 = (SELECT database_id FROM collections WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- param: $2 = (SELECT name FROM collections WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- param: $3 = (SELECT id FROM attached_functions ORDER BY id LIMIT 1)
-- The live collection an earlier, interrupted finish may have created, and
-- the other live attached function (if any) that already writes into it.
SELECT c.id,
       (SELECT af.id
          FROM attached_functions af
         WHERE af.output_collection_id = c.id
           AND af.id <> $3::uuid
           AND NOT af.is_deleted
         LIMIT 1) AS owner
  FROM collections c
 WHERE c.database_id = $1::uuid AND c.name = $2::text AND NOT c.is_deleted;

-- name: insert_collection
-- A concurrent creator of the same name makes this return no row (it waits
-- for that transaction first); the caller then reads the winner's row.
INSERT INTO collections (id, name, tenant_id, database_id)
VALUES ($1::uuid, $2::text, $3::text, $4::uuid)
ON CONFLICT (database_id, name) WHERE NOT is_deleted DO NOTHING
RETURNING id;

-- name: mark_ready
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- param: $2 = (SELECT id FROM collections WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- Output collection and readiness together, never one without the other.
UPDATE attached_functions
   SET output_collection_id = $2::uuid,
       is_ready = true,
       updated_at = now()
 WHERE id = $1::uuid AND NOT is_deleted
RETURNING id;

-- name: get_by_id
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
SELECT id, name, tenant_id, database_id, input_collection_id,
       output_collection_name, output_collection_id, function_id,
       function_params, completion_offset, last_run,
       min_records_for_invocation, current_attempts, is_alive, is_ready,
       created_at, updated_at
  FROM attached_functions
 WHERE id = $1::uuid AND is_ready AND NOT is_deleted;

-- name: get_by_name
-- param: $1 = (SELECT input_collection_id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- param: $2 = (SELECT name FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
SELECT id, name, tenant_id, database_id, input_collection_id,
       output_collection_name, output_collection_id, function_id,
       function_params, completion_offset, last_run,
       min_records_for_invocation, current_attempts, is_alive, is_ready,
       created_at, updated_at
  FROM attached_functions
 WHERE input_collection_id = $1::uuid AND name = $2::text
   AND is_ready AND NOT is_deleted;

-- name: list_by_collection
-- param: $1 = (SELECT input_collection_id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
SELECT id, name, tenant_id, database_id, input_collection_id,
       output_collection_name, output_collection_id, function_id,
       function_params, completion_offset, last_run,
       min_records_for_invocation, current_attempts, is_alive, is_ready,
       created_at, updated_at
  FROM attached_functions
 WHERE input_collection_id = $1::uuid AND is_ready AND NOT is_deleted
 ORDER BY name;

-- name: get_any_by_id
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
SELECT id, name, tenant_id, database_id, input_collection_id,
       output_collection_name, output_collection_id, function_id,
       function_params, completion_offset, last_run,
       min_records_for_invocation, current_attempts, is_alive, is_ready,
       created_at, updated_at
  FROM attached_functions
 WHERE id = $1::uuid AND NOT is_deleted;

-- name: get_any_by_name
-- param: $1 = (SELECT input_collection_id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- param: $2 = (SELECT name FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- Also the read of the existing row after phase 1 found a conflict.
SELECT id, name, tenant_id, database_id, input_collection_id,
       output_collection_name, output_collection_id, function_id,
       function_params, completion_offset, last_run,
       min_records_for_invocation, current_attempts, is_alive, is_ready,
       created_at, updated_at
  FROM attached_functions
 WHERE input_collection_id = $1::uuid AND name = $2::text AND NOT is_deleted;

-- name: update_params
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- Only ready rows: a not-ready row belongs to its attach until finished.
UPDATE attached_functions
   SET function_params = $2::jsonb,
       updated_at = now()
 WHERE id = $1::uuid AND is_ready AND NOT is_deleted
RETURNING id;

-- name: record_run
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- The offset never moves backwards, whatever order runs report in.
UPDATE attached_functions
   SET completion_offset = GREATEST(completion_offset, $2::bigint),
       last_run = now(),
       current_attempts = 0,
       updated_at = now()
 WHERE id = $1::uuid AND is_ready AND NOT is_deleted
RETURNING id;

-- name: detach
-- param: $1 = (SELECT id FROM attached_functions WHERE NOT is_deleted ORDER BY id LIMIT 1)
-- Soft delete; the rename frees the name under UNIQUE (input_collection_id, name).
UPDATE attached_functions
   SET is_deleted = true,
       name = '_deleted_' || name || '_' || id::text,
       updated_at = now()
 WHERE id = $1::uuid AND NOT is_deleted
RETURNING id;

-- name: sweep_stuck
-- Retires not-ready rows older than $1 seconds. SKIP LOCKED leaves alone a
-- row whose finish holds its lock right now (it is not stuck), and locking
-- in id order keeps two concurrent sweeps from deadlocking.
WITH stuck AS (
    SELECT id
      FROM attached_functions
     WHERE NOT is_ready AND NOT is_deleted
       AND created_at < now() - make_interval(secs => $1::double precision)
     ORDER BY id
       FOR UPDATE SKIP LOCKED
)
UPDATE attached_functions af
   SET is_deleted = true,
       name = '_deleted_' || af.name || '_' || af.id::text,
       updated_at = now()
  FROM stuck
 WHERE af.id = stuck.id
RETURNING af.id;

-- V2: attached functions, as they were before readiness existed.
--
-- An attached function runs a function from the `functions` catalogue over
-- the records of an input collection and writes into its output collection.
-- The application of this era creates the row and its output collection in
-- one transaction, so every row is complete the moment it is visible.
--
-- Soft delete keeps the row (is_deleted) and renames it to
-- `_deleted_<name>_<id>`, which frees the name under the unique constraint
-- below; that is why live names may not start with `_deleted_`.

CREATE TABLE attached_functions (
    id                         uuid        PRIMARY KEY,
    name                       text        NOT NULL,
    tenant_id                  text        NOT NULL,
    database_id                uuid        NOT NULL,
    input_collection_id        uuid        NOT NULL REFERENCES collections (id),
    output_collection_name     text        NOT NULL,
    output_collection_id       uuid                 REFERENCES collections (id),
    function_id                uuid        NOT NULL REFERENCES functions (id),
    function_params            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    completion_offset          bigint      NOT NULL DEFAULT 0,
    last_run                   timestamptz,
    min_records_for_invocation bigint      NOT NULL DEFAULT 100,
    current_attempts           integer     NOT NULL DEFAULT 0,
    is_alive                   boolean     NOT NULL DEFAULT true,
    is_deleted                 boolean     NOT NULL DEFAULT false,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT attached_functions_input_collection_id_name_key
        UNIQUE (input_collection_id, name)
);

CREATE INDEX attached_functions_input_collection_id
    ON attached_functions (input_collection_id);

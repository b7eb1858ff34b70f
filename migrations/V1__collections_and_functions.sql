-- V1: the collections side that attached functions reference, and the
-- catalogue of functions that can be attached.
--
-- Collections are soft-deleted (is_deleted) so that their ids stay valid for
-- whatever still points at them; a live collection's name is unique within its
-- database, a deleted one's name is free to be reused.

CREATE TABLE collections (
    id          uuid        PRIMARY KEY,
    name        text        NOT NULL,
    tenant_id   text        NOT NULL,
    database_id uuid        NOT NULL,
    is_deleted  boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE UNIQUE INDEX collections_database_id_name_live
    ON collections (database_id, name)
    WHERE NOT is_deleted;

CREATE TABLE functions (
    id             uuid    PRIMARY KEY,
    name           text    NOT NULL UNIQUE,
    is_incremental boolean NOT NULL,
    return_type    text    NOT NULL
);

-- The built-in functions. Fixed ids: application code and attached_functions
-- rows refer to them by id.
INSERT INTO functions (id, name, is_incremental, return_type) VALUES
    ('ccf2e3ba-633e-43ba-9394-46b0c54c61e3', 'record_counter', true,  'record'),
    ('1f2f2e3b-7c55-4f36-8a0e-3d0f6a8f1b21', 'statistics',     true,  'record'),
    ('6b6f0a34-2f3e-4b8e-9a1c-5d7e8f9a0b1c', 'summarize',      false, 'document');

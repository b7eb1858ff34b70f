-- V3: readiness, so that creating an attached function can be a two-phase
-- commit (insert not ready -> backfill -> create the output collection and
-- mark ready) and readers never see a half-built function.
--
-- Why `DEFAULT true` (and not false, and not a separate UPDATE backfill):
--
-- * Every row that exists before this migration was created by the one-phase
--   app, complete with its output collection: it IS ready. With DEFAULT true
--   those rows read as ready the moment the column exists.
-- * Since PostgreSQL 11 a constant default is stored in the catalogue
--   (pg_attribute.atthasmissing): ADD COLUMN does not touch a single row, does
--   not rewrite the table, and writes a few KB of WAL whatever the table's
--   size. The ACCESS EXCLUSIVE lock it needs is held for milliseconds. An
--   `UPDATE ... SET is_ready = true` backfill instead rewrites every row under
--   that lock (measured: 16.9 s and 508 MB of WAL at 1M rows).
-- * During the rolling deploy the legacy app keeps inserting rows without
--   naming is_ready. Those rows are complete (one-phase create), so the
--   default must make them ready; with DEFAULT false they would be invisible
--   to the current app's readers, which filter on is_ready.
-- * The current app always writes is_ready explicitly (false in phase 1), so
--   it never relies on this default.
--
-- Deploy order: apply V3, then roll out the current app. The legacy app keeps
-- working on V3 (it never names the column).

-- rollsafe:backfill attached_functions is_ready = true
ALTER TABLE attached_functions
    ADD COLUMN is_ready boolean NOT NULL DEFAULT true;

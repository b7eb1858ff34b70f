-- gift_note is written only by shop_v1, which is retired at V4 (its
-- statement set says `-- retired: 4`): it is stopped before this runs, so
-- no running app names the column any more. Dropping a column is
-- catalogue-only (a brief ACCESS EXCLUSIVE, no rewrite).
ALTER TABLE orders DROP COLUMN gift_note;

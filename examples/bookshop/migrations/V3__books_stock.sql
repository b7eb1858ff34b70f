-- Stock per book, for shop_v2's order-and-decrement. A constant default is
-- catalogue-only since PostgreSQL 11: no rewrite, and shop_v1 (which never
-- names the column) keeps inserting books that start at 0 in stock.
ALTER TABLE books ADD COLUMN stock bigint NOT NULL DEFAULT 0;

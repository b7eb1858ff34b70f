-- Orders of one book each. uuid keys: the shop's order numbers are handed
-- out before the row exists. gift_note is the first version's free-text
-- note; V4 drops it once no running app writes it.
CREATE TABLE orders (
    id        uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    book_id   bigint NOT NULL REFERENCES books (id),
    quantity  bigint NOT NULL CHECK (quantity > 0),
    gift_note text,
    placed_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX orders_book_id_idx ON orders (book_id);

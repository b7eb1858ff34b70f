-- app: shop_v1
-- needs: 2
-- retired: 4
--
-- The first shop: orders carry a gift note, books know nothing of stock.
-- It runs on V2 and V3 and is stopped before V4 drops gift_note.

-- name: add_author
INSERT INTO authors (name) VALUES ($1::text) RETURNING id;

-- name: add_book
-- param: $1 = (SELECT id FROM authors ORDER BY id LIMIT 1)
INSERT INTO books (author_id, title, isbn, price_cents)
VALUES ($1::bigint, $2::text, $3::text, $4::bigint)
RETURNING id;

-- name: get_book
-- param: $1 = (SELECT id FROM books ORDER BY id LIMIT 1)
SELECT b.id, b.title, b.isbn, b.price_cents, a.name AS author
  FROM books b JOIN authors a ON a.id = b.author_id
 WHERE b.id = $1::bigint;

-- name: books_by_author
-- param: $1 = (SELECT author_id FROM books ORDER BY id LIMIT 1)
SELECT id, title, price_cents FROM books WHERE author_id = $1::bigint ORDER BY title;

-- name: place_order
-- param: $1 = (SELECT id FROM books ORDER BY id LIMIT 1)
-- param: $2 = 1
INSERT INTO orders (book_id, quantity, gift_note)
VALUES ($1::bigint, $2::bigint, $3::text)
RETURNING id;

-- name: orders_for_book
-- param: $1 = (SELECT id FROM books ORDER BY id LIMIT 1)
SELECT id, quantity, gift_note, placed_at FROM orders WHERE book_id = $1::bigint ORDER BY placed_at;

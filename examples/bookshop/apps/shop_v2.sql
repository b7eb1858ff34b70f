-- app: shop_v2
-- needs: 3
--
-- The shop with stock: an order decrements the book's stock in the same
-- statement (a data-modifying CTE), so it never sells what is not there.
-- No gift notes. Rolls out after V3; still running after V4.

-- name: add_book
-- param: $1 = (SELECT id FROM authors ORDER BY id LIMIT 1)
INSERT INTO books (author_id, title, isbn, price_cents, stock)
VALUES ($1::bigint, $2::text, $3::text, $4::bigint, $5::bigint)
RETURNING id;

-- name: get_book
-- param: $1 = (SELECT id FROM books ORDER BY id LIMIT 1)
SELECT b.id, b.title, b.isbn, b.price_cents, b.stock, a.name AS author
  FROM books b JOIN authors a ON a.id = b.author_id
 WHERE b.id = $1::bigint;

-- name: restock
-- param: $1 = (SELECT id FROM books ORDER BY id LIMIT 1)
-- param: $2 = 5
UPDATE books SET stock = stock + $2::bigint WHERE id = $1::bigint;

-- name: place_order
-- param: $1 = (SELECT id FROM books ORDER BY id LIMIT 1)
-- param: $2 = 1
WITH taken AS (
    UPDATE books SET stock = stock - $2::bigint
     WHERE id = $1::bigint AND stock >= $2::bigint
    RETURNING id
)
INSERT INTO orders (book_id, quantity)
SELECT id, $2::bigint FROM taken
RETURNING id;

-- name: orders_for_book
-- param: $1 = (SELECT id FROM books ORDER BY id LIMIT 1)
SELECT id, quantity, placed_at FROM orders WHERE book_id = $1::bigint ORDER BY placed_at;

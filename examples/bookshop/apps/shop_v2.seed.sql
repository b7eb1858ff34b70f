-- Rows the way shop_v2 writes them: books with stock, orders without a
-- gift note (on top of any authors already there). {rows} is the number
-- of books.
INSERT INTO authors (name)
    SELECT 'author v2 ' || g FROM generate_series(1, greatest({rows} / 10, 1)) g;
INSERT INTO books (author_id, title, isbn, price_cents, stock)
    SELECT (SELECT max(id) FROM authors) - g % greatest({rows} / 10, 1),
           'book v2 ' || g, 'isbn-v2-' || g || '-' || gen_random_uuid(), 500 + g % 4000, g % 50
    FROM generate_series(1, {rows}) g;
INSERT INTO orders (book_id, quantity)
    SELECT id, 1 FROM books WHERE isbn LIKE 'isbn-v2-%' AND stock > 0;

-- Rows the way shop_v1 writes them: authors, books without a stock figure
-- (shop_v1 does not know the column), one order per book with a gift note
-- on every third. {rows} is the number of books.
INSERT INTO authors (name)
    SELECT 'author ' || g FROM generate_series(1, greatest({rows} / 10, 1)) g;
INSERT INTO books (author_id, title, isbn, price_cents)
    SELECT (SELECT min(id) FROM authors) + g % greatest({rows} / 10, 1),
           'book ' || g, 'isbn-v1-' || g || '-' || gen_random_uuid(), 500 + g % 4000
    FROM generate_series(1, {rows}) g;
INSERT INTO orders (book_id, quantity, gift_note)
    SELECT id, 1 + id % 3, CASE WHEN id % 3 = 0 THEN 'happy birthday' END
    FROM books WHERE isbn LIKE 'isbn-v1-%';

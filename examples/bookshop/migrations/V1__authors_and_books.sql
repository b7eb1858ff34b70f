-- The catalogue: authors and their books. Identity keys (the database
-- numbers rows, the app never does); an ISBN is unique when known.
CREATE TABLE authors (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE books (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    author_id   bigint NOT NULL REFERENCES authors (id),
    title       text NOT NULL,
    isbn        text UNIQUE,
    price_cents bigint NOT NULL CHECK (price_cents >= 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX books_author_id_idx ON books (author_id);

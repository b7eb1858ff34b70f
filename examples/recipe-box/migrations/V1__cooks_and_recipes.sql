-- The recipe box: cooks and the recipes they write. The CHECKs and the
-- foreign key are what a generated value does not satisfy by chance.
CREATE TABLE cooks (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email text NOT NULL UNIQUE CHECK (email ~ '^[a-z0-9._-]+@[a-z0-9.-]+\.[a-z]+$'),
    name text NOT NULL
);

CREATE TABLE recipes (
    id uuid PRIMARY KEY,
    cook_id bigint NOT NULL REFERENCES cooks (id),
    title text NOT NULL,
    tags text[] NOT NULL DEFAULT '{}',
    servings integer NOT NULL CHECK (servings BETWEEN 1 AND 24),
    notes text,
    created_at timestamptz NOT NULL
);

CREATE INDEX recipes_cook ON recipes (cook_id);

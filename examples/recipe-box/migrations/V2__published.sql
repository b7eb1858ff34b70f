-- Recipes can be drafts from now on. Every recipe written before this
-- migration, and every one the previous app writes while it still runs,
-- was published: the default says so (a constant default rewrites
-- nothing).
ALTER TABLE recipes ADD COLUMN published boolean NOT NULL DEFAULT true;

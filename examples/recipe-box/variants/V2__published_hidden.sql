-- The bug this example exists for: the new app lists `published = true`
-- recipes, and this default turns every existing recipe into a draft.
ALTER TABLE recipes ADD COLUMN published boolean NOT NULL DEFAULT false;

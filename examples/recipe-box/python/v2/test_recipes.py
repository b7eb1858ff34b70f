"""Recipe box, version 2: recipes can be drafts; lists show published
ones. The app's data access and its tests in one script (run it with
DATABASE_URL set; it exits non-zero when a test fails)."""

import datetime
import os
import uuid

import psycopg

NAMESPACE = uuid.UUID("6f1d2c3a-6a52-4e0e-9d1c-0d6f1f9b7a10")
WRITTEN = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.timezone.utc)


def add_cook(conn, email, name):
    row = conn.execute(
        "INSERT INTO cooks (email, name) VALUES (%s, %s) RETURNING id", (email, name)
    ).fetchone()
    return row[0]


def add_recipe(conn, cook_id, title, tags, servings, notes=None, published=True):
    recipe_id = uuid.uuid5(NAMESPACE, title)
    with conn.transaction():
        conn.execute(
            "INSERT INTO recipes (id, cook_id, title, tags, servings, notes, created_at, published)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (recipe_id, cook_id, title, tags, servings, notes, WRITTEN, published),
        )
    return recipe_id


def publish(conn, recipe_id):
    conn.execute("UPDATE recipes SET published = %s WHERE id = %s", (True, recipe_id))


def get_recipe(conn, recipe_id):
    return conn.execute(
        "SELECT id, title, servings FROM recipes WHERE id = %s", (recipe_id,), prepare=True
    ).fetchone()


def list_by_cook(conn, cook_id):
    # As an ORM writes it: the flag is a bound parameter, always true.
    return conn.execute(
        "SELECT id, title, tags FROM recipes WHERE cook_id = %s AND published = %s"
        " ORDER BY created_at, id",
        (cook_id, True),
    ).fetchall()


def count_for_a_crowd(conn):
    return conn.execute("SELECT count(*) FROM recipes WHERE servings >= 6").fetchone()[0]


def main():
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        conn.execute("TRUNCATE recipes, cooks")
        ada = add_cook(conn, "ada@example.org", "Ada")
        bo = add_cook(conn, "bo@example.org", "Bo")
        soup = add_recipe(conn, ada, "Leek soup", ["soup", "winter"], 4)
        draft = add_recipe(conn, ada, "Paella", ["rice"], 8, "needs a wide pan", published=False)
        add_recipe(conn, bo, "Flatbread", [], 2)
        assert get_recipe(conn, soup)[1] == "Leek soup"
        assert [r[1] for r in list_by_cook(conn, ada)] == ["Leek soup"]
        publish(conn, draft)
        assert [r[1] for r in list_by_cook(conn, ada)] == ["Leek soup", "Paella"]
        assert len(list_by_cook(conn, bo)) == 1
        assert count_for_a_crowd(conn) == 1
        conn.execute("CREATE TEMP TABLE scratch_totals (cook_id bigint, n int)")
        conn.execute(
            "INSERT INTO scratch_totals SELECT cook_id, count(*) FROM recipes GROUP BY cook_id"
        )
        conn.commit()
    print("recipes v2: all tests passed")


if __name__ == "__main__":
    main()

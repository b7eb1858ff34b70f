// Recipe box, version 1, in Java over JDBC: the app's data access and its
// tests in one file. Run: java -cp /usr/share/java/postgresql.jar RecipesTest.java
// with PGHOST, PGPORT, PGDATABASE, PGUSER and PGPASSWORD set; it exits
// non-zero when a test fails. Values are fixed, so two runs bind the same.
import java.sql.*;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.*;

public class RecipesTest {
    static final OffsetDateTime WRITTEN = OffsetDateTime.of(2026, 3, 1, 12, 0, 0, 0, ZoneOffset.UTC);

    static long addCook(Connection c, String email, String name) throws SQLException {
        try (PreparedStatement s = c.prepareStatement(
                "INSERT INTO cooks (email, name) VALUES (?, ?) RETURNING id")) {
            s.setString(1, email);
            s.setString(2, name);
            try (ResultSet r = s.executeQuery()) {
                r.next();
                return r.getLong(1);
            }
        }
    }

    static UUID addRecipe(Connection c, long cook, String title, String[] tags, int servings, String notes)
            throws SQLException {
        UUID id = UUID.nameUUIDFromBytes(title.getBytes());
        try (PreparedStatement s = c.prepareStatement(
                "INSERT INTO recipes (id, cook_id, title, tags, servings, notes, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)")) {
            s.setObject(1, id);
            s.setLong(2, cook);
            s.setString(3, title);
            s.setArray(4, c.createArrayOf("text", tags));
            s.setInt(5, servings);
            if (notes == null) s.setNull(6, Types.VARCHAR); else s.setString(6, notes);
            s.setObject(7, WRITTEN);
            s.executeUpdate();
        }
        return id;
    }

    static String title(Connection c, UUID id) throws SQLException {
        try (PreparedStatement s = c.prepareStatement("SELECT id, title, servings FROM recipes WHERE id = ?")) {
            s.setObject(1, id);
            try (ResultSet r = s.executeQuery()) {
                return r.next() ? r.getString(2) : null;
            }
        }
    }

    static List<String> byCook(Connection c, long cook) throws SQLException {
        List<String> out = new ArrayList<>();
        try (PreparedStatement s = c.prepareStatement(
                "SELECT id, title, tags FROM recipes WHERE cook_id = ? ORDER BY created_at, id")) {
            s.setLong(1, cook);
            try (ResultSet r = s.executeQuery()) {
                while (r.next()) out.add(r.getString(2));
            }
        }
        return out;
    }

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + System.getenv("PGHOST") + ":" + System.getenv("PGPORT") + "/"
                + System.getenv("PGDATABASE");
        try (Connection c = DriverManager.getConnection(url, System.getenv("PGUSER"), System.getenv("PGPASSWORD"))) {
            c.createStatement().execute("TRUNCATE recipes, cooks");
            c.setAutoCommit(false);
            long ada = addCook(c, "ada@example.org", "Ada");
            long bo = addCook(c, "bo@example.org", "Bo");
            UUID soup = addRecipe(c, ada, "Leek soup", new String[] {"soup", "winter"}, 4, null);
            addRecipe(c, ada, "Paella", new String[] {"rice"}, 8, "needs a wide pan");
            addRecipe(c, bo, "Flatbread", new String[] {}, 2, null);
            c.commit();
            c.setAutoCommit(true);
            // Past the driver's prepareThreshold (5) the statement is a
            // named server-side one (S_1, …).
            for (int i = 0; i < 6; i++) check("Leek soup".equals(title(c, soup)), "title");
            check(byCook(c, ada).equals(List.of("Leek soup", "Paella")), "ada's recipes");
            check(byCook(c, bo).size() == 1, "bo's recipes");
        }
        System.out.println("recipes v1 (java): all tests passed");
    }
}

import java.sql.*;

public class UserDao {
    public ResultSet byName(Connection conn, String name) throws SQLException {
        Statement stmt = conn.createStatement();
        return stmt.executeQuery("SELECT * FROM users WHERE name = '" + name + "'"); // want: sql-injection
    }

    public void delete(Statement stmt, String id) throws SQLException {
        String q = String.format("DELETE FROM items WHERE id = %s", id); // want: sql-injection
        stmt.execute(q);
    }
}

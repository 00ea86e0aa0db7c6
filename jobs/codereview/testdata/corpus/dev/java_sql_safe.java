import java.sql.*;

public class UserDao {
    private static final String BY_NAME = "SELECT * FROM users WHERE name = ?";

    public ResultSet byName(Connection conn, String name) throws SQLException {
        PreparedStatement ps = conn.prepareStatement(BY_NAME);
        ps.setString(1, name);
        log("Select returned for " + name);
        return ps.executeQuery();
    }
}

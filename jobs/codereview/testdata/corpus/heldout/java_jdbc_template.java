import java.util.List;
import java.util.Map;

public class Repo {
    public List<Map<String, Object>> byA(JdbcTemplate jdbc, String a) {
        return jdbc.queryForList("SELECT * FROM t WHERE a = '" + a + "'"); // want: sql-injection
    }

    public List<Thing> byASafe(JdbcTemplate jdbc, String a) {
        return jdbc.query("SELECT * FROM t WHERE a = ?", mapper, a);
    }

    public List<User> jpql(EntityManager em, String name) {
        return em.createQuery("FROM User u WHERE u.name = '" + name + "'").getResultList(); // want: sql-injection
    }
}

public class Config {
    private final String password = System.getenv("DB_PASSWORD");
    private String token = "";

    public String url() {
        return "jdbc:postgresql://db/app?user=app";
    }
}

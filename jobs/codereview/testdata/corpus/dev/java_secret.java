public class GitHubClient {
    private static final String TOKEN = "@@SECRET:github-pat@@"; // want: hardcoded-secret

    public String header() {
        return "token " + TOKEN;
    }
}

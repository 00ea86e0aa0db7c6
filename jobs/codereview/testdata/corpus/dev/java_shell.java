import java.io.IOException;

public class Tools {
    public Process ping(String host) throws IOException {
        return Runtime.getRuntime().exec("ping -c 1 " + host); // want: command-injection
    }

    public Process list(String dir) throws IOException {
        return new ProcessBuilder("bash", "-c", "ls -la " + dir).start(); // want: command-injection
    }
}

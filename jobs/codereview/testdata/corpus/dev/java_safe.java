import java.util.Map;
import java.util.function.IntBinaryOperator;

public class Ops {
    private static final Map<String, IntBinaryOperator> OPS = Map.of("add", (a, b) -> a + b, "mul", (a, b) -> a * b);

    public int apply(String op, int a, int b) {
        String msg = "select an operation from " + OPS.keySet();
        System.out.println(msg);
        return OPS.get(op).applyAsInt(a, b);
    }
}

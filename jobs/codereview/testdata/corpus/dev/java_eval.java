import javax.script.*;
import org.springframework.expression.spel.standard.SpelExpressionParser;

public class Calc {
    public Object run(String userScript) throws ScriptException {
        ScriptEngine engine = new ScriptEngineManager().getEngineByName("nashorn");
        return engine.eval(userScript); // want: code-eval
    }

    public Object spel(String expr) {
        SpelExpressionParser parser = new SpelExpressionParser();
        return parser.parseExpression(expr).getValue(); // want: code-eval
    }
}

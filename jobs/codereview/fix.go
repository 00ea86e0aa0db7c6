package codereview

// Concrete fixes per rule and language: what to write instead.

func fixSQL(lang string) string {
	switch lang {
	case langPython:
		return `Pass values as query parameters, never in the SQL text: cursor.execute("SELECT * FROM users WHERE name = %s", (name,)) (sqlite3 uses ? placeholders). Table or column names that vary must come from an allowlist.`
	case langJavaScript, langTypeScript:
		return `Use placeholders and pass values separately: db.query("SELECT * FROM users WHERE name = $1", [name]) (mysql: ? placeholders), or a query builder's bound parameters; never build SQL with + or template literals.`
	case langGo:
		return `Use placeholders and pass values as arguments: db.QueryContext(ctx, "SELECT * FROM users WHERE name = $1", name) (MySQL: ?); never fmt.Sprintf or + into SQL. Identifiers that vary must come from an allowlist.`
	case langPHP:
		return `Use a prepared statement: $stmt = $pdo->prepare("SELECT * FROM users WHERE name = ?"); $stmt->execute([$name]); (mysqli: prepare + bind_param). Never put variables inside the SQL string.`
	case langJava:
		return `Use a PreparedStatement: PreparedStatement ps = conn.prepareStatement("SELECT * FROM users WHERE name = ?"); ps.setString(1, name); (JPA: setParameter on a named parameter). Never concatenate into SQL.`
	case langRuby:
		return `Let the driver bind values: User.where("name = ?", name) or User.where(name: name); with raw SQL use sanitize_sql_array or prepared statements, never #{} inside SQL.`
	}
	return "Pass values as bound query parameters instead of putting them into the SQL text."
}

func fixEval(lang string) string {
	switch lang {
	case langPython:
		return "Do not evaluate strings. Parse data with ast.literal_eval() or json.loads(); map allowed operation names to functions in a dict instead of building code."
	case langJavaScript, langTypeScript:
		return "Do not evaluate strings. Use JSON.parse() for data, a lookup table of functions for dynamic behaviour, and pass a function (not a string) to setTimeout/setInterval."
	case langPHP:
		return "Remove eval/create_function/assert-with-string. Use json_decode() for data, closures or a whitelist map of callables for behaviour, and preg_replace_callback() instead of the /e modifier."
	case langJava:
		return "Do not evaluate caller text as script or SpEL. Offer a fixed set of operations (a Map<String, Function>), or evaluate with a sandboxed, restricted context (SimpleEvaluationContext) if an expression language is required."
	case langRuby:
		return "Do not eval strings. Use public_send with an allowlisted method name, a Hash of lambdas, or JSON.parse for data; pass a block instead of a string to instance_eval/class_eval."
	case langGo:
		return "Do not interpret caller text as code. Offer a fixed set of operations (a map[string]func) or a restricted expression language with explicit limits."
	case langShell:
		return `Remove eval. Store commands in arrays and run them directly: cmd=(grep -- "$pattern" "$file"); "${cmd[@]}". Use printf -v or declare for indirect assignment.`
	}
	return "Do not evaluate strings as code; parse data with a data format parser and dispatch on an allowlist of operations."
}

func fixShell(lang string) string {
	switch lang {
	case langPython:
		return `Run the program without a shell and pass arguments as a list: subprocess.run(["ping", "-c", "1", host], check=True). If a shell is unavoidable, quote each value with shlex.quote().`
	case langJavaScript, langTypeScript:
		return `Use execFile/spawn without a shell and pass arguments as an array: execFile("ping", ["-c", "1", host], callback). Never build a command string for exec().`
	case langGo:
		return `Run the program directly with separate arguments: exec.CommandContext(ctx, "ping", "-c", "1", host). Do not go through sh -c; validate values that become arguments (e.g. reject a leading "-").`
	case langPHP:
		return `Avoid the shell: use proc_open with an argument array (PHP 7.4+): proc_open(["ping", "-c", "1", $host], $spec, $pipes). Otherwise wrap every value in escapeshellarg().`
	case langJava:
		return `Use ProcessBuilder with one argument per element and no shell: new ProcessBuilder("ping", "-c", "1", host).start(); never Runtime.exec(String) or "sh -c" with concatenated input.`
	case langRuby:
		return `Pass the program and its arguments separately so no shell runs: system("ping", "-c", "1", host) or Open3.capture2("ping", "-c", "1", host); never interpolate into a command string or backticks.`
	case langShell:
		return `Do not build command strings for sh -c, ssh or eval. Run the command directly with quoted arguments: grep -- "$pattern" "$file"; for sh -c pass values as positional parameters: sh -c 'grep -- "$1" "$2"' _ "$pattern" "$file".`
	}
	return "Run programs without a shell, with each argument passed separately; never build command strings from input."
}

func fixSecret(lang string) string {
	read := "from the environment or a secret manager"
	switch lang {
	case langPython:
		read = `from the environment: os.environ["API_KEY"]`
	case langJavaScript, langTypeScript:
		read = "from the environment: process.env.API_KEY"
	case langGo:
		read = `from the environment: os.Getenv("API_KEY")`
	case langPHP:
		read = `from the environment: getenv("API_KEY")`
	case langJava:
		read = `from the environment: System.getenv("API_KEY")`
	case langRuby:
		read = `from the environment: ENV.fetch("API_KEY")`
	case langShell:
		read = `from the environment: "${API_KEY:?not set}"`
	}
	return "Revoke and rotate this secret now (it is in the code's history), then read it " + read + " or from a secret manager; never commit it."
}

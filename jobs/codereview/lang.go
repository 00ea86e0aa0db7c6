package codereview

import (
	"slices"
	"strings"
)

// Languages with static rules beyond secrets. Names are the canonical values
// of the result's language field.
const (
	langPython     = "python"
	langJavaScript = "javascript"
	langTypeScript = "typescript"
	langGo         = "go"
	langPHP        = "php"
	langJava       = "java"
	langRuby       = "ruby"
	langShell      = "shell"
)

// languages maps every accepted language name (lower case) to its canonical
// name. Languages outside the eight above get the secret rules and the
// model's review only.
var languages = map[string]string{
	"python": langPython, "py": langPython, "python3": langPython,
	"javascript": langJavaScript, "js": langJavaScript, "node": langJavaScript, "nodejs": langJavaScript, "jsx": langJavaScript, "mjs": langJavaScript, "cjs": langJavaScript,
	"typescript": langTypeScript, "ts": langTypeScript, "tsx": langTypeScript,
	"go": langGo, "golang": langGo,
	"php":  langPHP,
	"java": langJava,
	"ruby": langRuby, "rb": langRuby,
	"shell": langShell, "sh": langShell, "bash": langShell, "zsh": langShell, "ksh": langShell, "dash": langShell,

	"c": "c", "cpp": "cpp", "c++": "cpp", "csharp": "csharp", "c#": "csharp", "cs": "csharp",
	"rust": "rust", "rs": "rust", "kotlin": "kotlin", "kt": "kotlin", "swift": "swift", "scala": "scala",
	"dart": "dart", "elixir": "elixir", "erlang": "erlang", "haskell": "haskell", "lua": "lua", "perl": "perl",
	"r": "r", "julia": "julia", "sql": "sql", "powershell": "powershell", "ps1": "powershell",
	"html": "html", "css": "css", "yaml": "yaml", "yml": "yaml", "json": "json", "toml": "toml", "xml": "xml",
	"dockerfile": "dockerfile", "terraform": "terraform", "hcl": "terraform", "solidity": "solidity", "sol": "solidity",
	"objective-c": "objective-c", "objc": "objective-c", "vue": "vue", "svelte": "svelte",
}

// canonicalLanguage returns the canonical name of lang and whether it is
// accepted.
func canonicalLanguage(lang string) (string, bool) {
	c, ok := languages[strings.ToLower(strings.TrimSpace(lang))]
	return c, ok
}

// staticLanguages are the languages with code rules (eval, SQL, shell).
var staticLanguages = []string{langPython, langJavaScript, langTypeScript, langGo, langPHP, langJava, langRuby, langShell}

// acceptedLanguages lists the canonical names, sorted, for error messages
// and the input schema.
func acceptedLanguages() []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range languages {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "write docs/configuration.md from the Config")

// configDocsPath is the generated page, from this package's directory.
var configDocsPath = filepath.Join("..", "..", "docs", "configuration.md")

// TestConfigurationDocs fails when docs/configuration.md is not the page
// configDocs makes of the Config; `go tool task docs` (go generate) writes
// it.
func TestConfigurationDocs(t *testing.T) {
	t.Parallel()
	want, err := configDocs()
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(configDocsPath, []byte(want), 0o644))
	}
	got, err := os.ReadFile(configDocsPath)
	require.NoError(t, err)
	require.Equal(t, want, string(got), "docs/configuration.md differs from the Config: run `go tool task docs`")
}

// TestConfigDocumented checks that every field of Config is read from a
// variable of its own and documented.
func TestConfigDocumented(t *testing.T) {
	t.Parallel()
	docs, err := configFieldDocs()
	require.NoError(t, err)
	seen := map[string]string{}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		name := f.Tag.Get("env")
		require.NotEmpty(t, name, "Config.%s has no env tag", f.Name)
		require.Empty(t, seen[name], "Config.%s and Config.%s both read %s", seen[name], f.Name, name)
		seen[name] = f.Name
		require.NotEmpty(t, docs[f.Name], "Config.%s has no doc comment", f.Name)
	}
}

// configFieldDocs returns the doc comment of each field of Config, read
// from config.go.
func configFieldDocs() (map[string]string, error) {
	file, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	docs := map[string]string{}
	ast.Inspect(file, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Config" {
			return true
		}
		for _, f := range ts.Type.(*ast.StructType).Fields.List {
			for _, name := range f.Names {
				docs[name.Name] = strings.Join(strings.Fields(f.Doc.Text()), " ")
			}
		}
		return false
	})
	if len(docs) == 0 {
		return nil, fmt.Errorf("config.go: no Config struct")
	}
	return docs, nil
}

// docLink is a page of docs/ named in a comment, linked from its neighbour.
var docLink = regexp.MustCompile(`\bdocs/([a-z]+\.md)\b`)

// configDocs renders docs/configuration.md: a table per section of
// Config, each variable with its default (DefaultConfig's) and its field's
// comment.
func configDocs() (string, error) {
	docs, err := configFieldDocs()
	if err != nil {
		return "", err
	}
	typ := reflect.TypeFor[Config]()
	def := reflect.ValueOf(DefaultConfig()).Elem()
	var names []string
	for _, f := range reflect.VisibleFields(typ) {
		names = append(names, regexp.QuoteMeta(f.Tag.Get("env")))
	}
	// Variables named in a comment are set as code.
	variable := regexp.MustCompile(`\b(?:` + strings.Join(names, "|") + `)(?:=\S+)?`)

	var b strings.Builder
	b.WriteString(`# Configuration

<!-- Generated from the Config of cmd/x402d/config.go by ` + "`go tool task docs`" + `: edit it there. -->

x402d reads its configuration from environment variables, all optional: the
defaults run everything on one machine with the embedded devchain. A value
that cannot be used stops the process before anything starts, with every
variable in error named at once. Running it for real money:
[operating.md](operating.md).
`)
	for _, f := range reflect.VisibleFields(typ) {
		if section := f.Tag.Get("section"); section != "" {
			fmt.Fprintf(&b, "\n## %s\n\n| variable | default | meaning |\n| --- | --- | --- |\n", section)
		}
		doc := fieldDoc(f.Name, docs[f.Name])
		doc = variable.ReplaceAllStringFunc(doc, func(s string) string { return "`" + s + "`" })
		doc = strings.ReplaceAll(doc, "|", `\|`)
		doc = docLink.ReplaceAllString(doc, "[$1]($1)")
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.Tag.Get("env"), formatDefault(def.FieldByIndex(f.Index), f.Tag), doc)
	}
	return b.String(), nil
}

// fieldDoc returns a field's comment as a sentence of its own: without the
// field's name and the verb "is" or "are" that follows it.
func fieldDoc(field, doc string) string {
	rest, ok := strings.CutPrefix(doc, field+" ")
	if !ok {
		return doc
	}
	for _, verb := range []string{"is ", "are "} {
		if r, ok := strings.CutPrefix(rest, verb); ok {
			rest = r
			break
		}
	}
	r, size := utf8.DecodeRuneInString(rest)
	return string(unicode.ToUpper(r)) + rest[size:]
}

// formatDefault writes a default value as the environment would set it.
func formatDefault(v reflect.Value, tag reflect.StructTag) string {
	code := func(s string) string { return "`" + s + "`" }
	switch x := v.Interface().(type) {
	case time.Duration:
		if x == 0 {
			return "unset"
		}
		if x%(24*time.Hour) == 0 {
			return code(fmt.Sprintf("%dd", x/(24*time.Hour)))
		}
		s := x.String() // 2m0s, 1h0m0s
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return code(s)
	case *big.Int:
		if x == nil {
			return "unset"
		}
		exp, _ := strconv.Atoi(tag.Get("decimals"))
		r := new(big.Rat).SetFrac(x, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(exp)), nil))
		return code(strings.TrimRight(strings.TrimRight(r.FloatString(exp), "0"), "."))
	case float64:
		return code(strconv.FormatFloat(x, 'g', -1, 64))
	}
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			return "unset"
		}
		return code(v.String())
	case reflect.Int, reflect.Int64:
		return code(strconv.FormatInt(v.Int(), 10))
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			return "unset"
		}
	}
	return code(fmt.Sprint(v.Interface()))
}

package ops

import (
	"fmt"
	"html/template"
	"math/big"
	"strings"
	"time"
)

// usdcDecimals is the number of decimals of USDC, the asset every price is
// quoted in.
const usdcDecimals = 6

// usdc formats an amount in atomic units as USDC with six decimals.
func usdc(atomic string) string {
	n, ok := new(big.Int).SetString(atomic, 10)
	if !ok {
		return atomic
	}
	neg := n.Sign() < 0
	s := new(big.Int).Abs(n).String()
	if len(s) <= usdcDecimals {
		s = strings.Repeat("0", usdcDecimals-len(s)+1) + s
	}
	out := s[:len(s)-usdcDecimals] + "." + s[len(s)-usdcDecimals:]
	if neg {
		out = "-" + out
	}
	return out
}

// addAtomic adds two decimal integers.
func addAtomic(a, b string) string {
	x, ok1 := new(big.Int).SetString(a, 10)
	y, ok2 := new(big.Int).SetString(b, 10)
	if !ok1 || !ok2 {
		return a
	}
	return x.Add(x, y).String()
}

// formatDuration writes d with a unit that suits its size.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	case d < time.Minute:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// ago writes how long before now t was.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	if d < 0 {
		d = 0
	}
	if d < time.Second {
		return "just now"
	}
	if d < time.Minute {
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	}
	return formatDuration(d.Truncate(time.Second)) + " ago"
}

// funcs are the templates' functions.
var funcs = template.FuncMap{
	"usdc": usdc,
	"eth":  eth,
	"gwei": gwei,
	"ago":  ago,
	"ts": func(t time.Time) string {
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"tsp": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"agep": func(now time.Time, t *time.Time) string {
		if t == nil {
			return "—"
		}
		return formatDuration(now.Sub(*t).Truncate(time.Second))
	},
	"short": func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		return s[:n] + "…"
	},
}

// pageNames are the templates under templates/, each executed inside
// layout.html.
var pageNames = []string{"overview", "calls", "call", "index", "login", "notfound"}

func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("ops: parse page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// eth formats an amount of wei (a decimal string or *big.Int) as the native
// token with 6 decimals.
func eth(v any) string {
	n := bigOf(v)
	if n == nil {
		return "—"
	}
	f := new(big.Float).Quo(new(big.Float).SetInt(n), big.NewFloat(1e18))
	return f.Text('f', 6)
}

// gwei formats an amount of wei as gwei with 3 decimals.
func gwei(v any) string {
	n := bigOf(v)
	if n == nil {
		return "—"
	}
	f := new(big.Float).Quo(new(big.Float).SetInt(n), big.NewFloat(1e9))
	return f.Text('f', 3)
}

func bigOf(v any) *big.Int {
	switch x := v.(type) {
	case *big.Int:
		return x
	case string:
		n, ok := new(big.Int).SetString(x, 10)
		if !ok {
			return nil
		}
		return n
	}
	return nil
}

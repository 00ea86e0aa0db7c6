package calc

import (
	"fmt"
	"strconv"
)

var ops = map[string]func(a, b float64) float64{
	"add": func(a, b float64) float64 { return a + b },
}

func Apply(op, a, b string) (string, error) {
	x, err := strconv.ParseFloat(a, 64)
	if err != nil {
		return "", fmt.Errorf("parse %q: %w", a, err)
	}
	y, err := strconv.ParseFloat(b, 64)
	if err != nil {
		return "", fmt.Errorf("parse %q: %w", b, err)
	}
	f, ok := ops[op]
	if !ok {
		return "", fmt.Errorf("select an operation: %q is unknown", op)
	}
	return strconv.FormatFloat(f(x, y), 'g', -1, 64), nil
}

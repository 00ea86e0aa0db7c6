package table

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInfer(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		given  string
		expect Type
	}{
		{"", Null},
		{"true", Boolean},
		{"false", Boolean},
		{"TRUE", String},
		{"True", String},
		{"null", String},
		{"0", Integer},
		{"-0", Integer},
		{"7", Integer},
		{"-42", Integer},
		{"123456789012345678901234567890", Integer},
		{"007", String},
		{"-007", String},
		{"+1", String},
		{"-", String},
		{"1.5", Number},
		{"-0.0", Number},
		{"0.5e-3", Number},
		{"1e10", Number},
		{"1E+2", Number},
		{"1e400", Number},
		{".5", String},
		{"1.", String},
		{"1e", String},
		{"1e+", String},
		{"1.e5", String},
		{" 1", String},
		{"1 ", String},
		{"1,5", String},
		{"0x10", String},
		{"NaN", String},
		{"Infinity", String},
		{"--1", String},
		{"t", String},
		{"fals", String},
		{"hello", String},
	}
	for _, tc := range testCases {
		require.Equal(t, tc.expect, Infer(tc.given), "Infer(%q)", tc.given)
		// Every text typed as a number or boolean is a JSON scalar literal
		// with nothing around it, and every such literal but null is typed so.
		if tc.given != "" {
			c, last := tc.given[0], tc.given[len(tc.given)-1]
			isLiteral := json.Valid([]byte(tc.given)) && tc.given != "null" &&
				c != '"' && c != '{' && c != '[' && c != ' ' && last != ' '
			require.Equal(t, isLiteral, tc.expect != String, "JSON literal status of %q", tc.given)
		}
	}
}

func TestTypeJoin(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		a, b, expect Type
	}{
		{Null, Null, Null},
		{Null, Integer, Integer},
		{Boolean, Null, Boolean},
		{Integer, Integer, Integer},
		{Integer, Number, Number},
		{Number, Integer, Number},
		{Integer, Boolean, String},
		{Number, String, String},
		{Object, Object, Object},
		{Object, Array, String},
		{Array, Integer, String},
	}
	for _, tc := range testCases {
		require.Equal(t, tc.expect, tc.a.Join(tc.b), "%s join %s", tc.a, tc.b)
	}
}

func TestTypeMarshalText(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal([]Type{Null, Boolean, Integer, Number, String, Object, Array})
	require.NoError(t, err)
	require.JSONEq(t, `["null","boolean","integer","number","string","object","array"]`, string(b))
	_, err = Type(99).MarshalText()
	require.Error(t, err)
}

func TestColumnTypes(t *testing.T) {
	t.Parallel()
	tab, err := Parse("i,n,s,b,z,e,mixed\n1,1,a,true,007,,1\n2,2.5,3,false,90210,,x\n", nil)
	require.NoError(t, err)
	require.Equal(t, []Type{Integer, Number, String, Boolean, String, Null, String}, tab.ColumnTypes())
}

func TestUniqueNames(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		given, expect []string
	}{
		{[]string{"a", "b"}, []string{"a", "b"}},
		{[]string{"a", "a", "a"}, []string{"a", "a_2", "a_3"}},
		{[]string{"a", "a", "a_2"}, []string{"a", "a_3", "a_2"}},
		{[]string{"", "x", ""}, []string{"column_1", "x", "column_3"}},
		{[]string{"column_2", ""}, []string{"column_2", "column_2_2"}},
		{[]string{}, []string{}},
	}
	for _, tc := range testCases {
		got := UniqueNames(tc.given)
		require.Equal(t, tc.expect, got, "UniqueNames(%q)", tc.given)
		seen := map[string]bool{}
		for _, n := range got {
			require.NotEmpty(t, n)
			require.False(t, seen[n], "duplicate %q", n)
			seen[n] = true
		}
	}
}

package bounded_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/x402d/x402d/internal/bounded"
)

func TestMap(t *testing.T) {
	t.Parallel()
	testCases := []struct {
		name string
		// run acts on a Map of limit 4 and checks it.
		run func(t *testing.T, m *bounded.Map[string, int])
	}{
		{
			name: "ok, a value put is got",
			run: func(t *testing.T, m *bounded.Map[string, int]) {
				m.Put("a", 1)
				v, ok := m.Get("a")
				require.True(t, ok)
				require.Equal(t, 1, v)
				_, ok = m.Get("b")
				require.False(t, ok)
			},
		},
		{
			name: "ok, the entries never exceed the limit",
			run: func(t *testing.T, m *bounded.Map[string, int]) {
				for i := range 1000 {
					m.Put(fmt.Sprint(i), i)
					require.LessOrEqual(t, m.Len(), 4)
				}
				v, ok := m.Get("999")
				require.True(t, ok)
				require.Equal(t, 999, v)
				_, ok = m.Get("0")
				require.False(t, ok, "the oldest entries go")
			},
		},
		{
			name: "ok, a key in use survives a flood of others",
			run: func(t *testing.T, m *bounded.Map[string, int]) {
				m.Put("kept", 7)
				for i := range 1000 {
					m.Put(fmt.Sprint(i), i)
					_, ok := m.Get("kept")
					require.True(t, ok, "after %d others", i)
				}
			},
		},
		{
			name: "ok, update reads and writes in one step",
			run: func(t *testing.T, m *bounded.Map[string, int]) {
				inc := func(v int, ok bool) int { return v + 1 }
				m.Update("a", inc)
				require.Equal(t, 2, m.Update("a", inc))
				m.Delete("a")
				require.Equal(t, 1, m.Update("a", inc))
			},
		},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, bounded.New[string, int](4))
		})
	}
}

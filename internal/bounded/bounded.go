// Package bounded is a map whose number of entries has a fixed bound, for
// state kept per client or per payer in a process that runs for months:
// under a flood of distinct keys its memory stays flat, and the keys used
// least recently go first.
//
// It keeps two generations of entries: new and recently read entries in
// the current one, the others in the previous one. When the current
// generation holds half the bound, it becomes the previous one and the
// previous one is dropped whole. A key read in the previous generation
// moves to the current one, so a key in use survives any number of
// rotations (approximately least recently used, at the cost of a map
// write per rotation instead of a list per entry).
package bounded

import "sync"

// Map is a bounded map from K to V. Its methods are safe for concurrent
// use. The zero Map is not usable: make one with New.
type Map[K comparable, V any] struct {
	mu   sync.Mutex
	half int
	cur  map[K]V
	prev map[K]V
}

// New returns a Map of at most limit entries (at least 2).
func New[K comparable, V any](limit int) *Map[K, V] {
	half := max(limit/2, 1)
	return &Map[K, V]{half: half, cur: make(map[K]V, half)}
}

// Get returns the value of key, and whether it is there.
func (m *Map[K, V]) Get(key K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.get(key)
}

func (m *Map[K, V]) get(key K) (V, bool) {
	if v, ok := m.cur[key]; ok {
		return v, true
	}
	v, ok := m.prev[key]
	if ok {
		delete(m.prev, key)
		m.put(key, v)
	}
	return v, ok
}

// Put sets the value of key.
func (m *Map[K, V]) Put(key K, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.prev, key)
	m.put(key, v)
}

func (m *Map[K, V]) put(key K, v V) {
	if _, ok := m.cur[key]; !ok && len(m.cur) >= m.half {
		m.prev, m.cur = m.cur, make(map[K]V, m.half)
	}
	m.cur[key] = v
}

// Update calls f with the value of key (the zero V and false when it is
// not there) and stores what f returns, in one step.
func (m *Map[K, V]) Update(key K, f func(v V, ok bool) V) V {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.get(key)
	v = f(v, ok)
	m.put(key, v)
	return v
}

// Delete removes key.
func (m *Map[K, V]) Delete(key K) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.cur, key)
	delete(m.prev, key)
}

// Len returns the number of entries, at most the bound.
func (m *Map[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.cur) + len(m.prev)
}

package metrics

// RenderSize renders m's metrics once into a buffer of size, gzips them, and returns
// the text's size.
func RenderSize(m *Metrics, size int) int {
	x := m.render(size)
	x.gzipped()
	return len(x.text)
}

// Holds reports whether m keeps a rendering to serve.
func Holds(m *Metrics) bool {
	m.serving.mu.Lock()
	defer m.serving.mu.Unlock()
	return m.serving.last != nil
}

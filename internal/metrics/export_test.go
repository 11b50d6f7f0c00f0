package metrics

// RenderSize renders m's metrics once and returns the text's size.
func RenderSize(m *Metrics) int { return len(m.render(0).text) }

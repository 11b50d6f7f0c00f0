package metrics

import (
	"bytes"
	"cmp"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The metrics labelled by scope (the route counters and the pool gauges) have series
// by the thousand; they are kept here, not in the registry, and a rendering writes
// their text itself: at 5,000 scopes the registry's gathering (a message per series,
// every label checked, hashed and sorted) and its encoder cost more than the rest of
// a rendering together. Gather builds the same families as messages, for tests and
// any Gatherer's user.

// scopedFamily is a family labelled by scope and at most one label more, sorted by
// scope: what a rendering writes as text and Gather returns as a message.
type scopedFamily struct {
	name, help string
	typ        dto.MetricType
	// label is the second label's name ("" for none); series yields the series, n
	// of them, in order (the gauges' straight from the pool's counts, so that tens of
	// thousands of them are written without being copied first).
	label  string
	series iter.Seq[scopedRow]
	n      int
}

type scopedRow struct {
	scope, value string
	n            int64
}

// text writes f in the Prometheus text format, as expfmt writes a family of integers.
func (f *scopedFamily) text(b *bytes.Buffer) {
	b.WriteString("# HELP ")
	b.WriteString(f.name)
	b.WriteByte(' ')
	escapeHelp(b, f.help)
	b.WriteString("\n# TYPE ")
	b.WriteString(f.name)
	if f.typ == dto.MetricType_COUNTER {
		b.WriteString(" counter\n")
	} else {
		b.WriteString(" gauge\n")
	}
	// Labels in the order of their names, as the registry writes them.
	labelFirst := f.label != "" && f.label < labelScope
	var num [20]byte
	for r := range f.series {
		b.WriteString(f.name)
		b.WriteByte('{')
		if labelFirst {
			label(b, f.label, r.value)
			b.WriteByte(',')
		}
		label(b, labelScope, r.scope)
		if f.label != "" && !labelFirst {
			b.WriteByte(',')
			label(b, f.label, r.value)
		}
		b.WriteString("} ")
		b.Write(strconv.AppendInt(num[:0], r.n, 10))
		b.WriteByte('\n')
	}
}

// label writes name="value", the value escaped as the text format wants.
func label(b *bytes.Buffer, name, value string) {
	b.WriteString(name)
	b.WriteString(`="`)
	if !needsEscape(value) {
		b.WriteString(value)
	} else {
		for i := range len(value) {
			switch c := value[i]; c {
			case '\\':
				b.WriteString(`\\`)
			case '"':
				b.WriteString(`\"`)
			case '\n':
				b.WriteString(`\n`)
			default:
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
}

// needsEscape reports whether a label value has a byte the text format escapes
// (scope ids, sources and codes have none).
func needsEscape(v string) bool {
	for i := range len(v) {
		if c := v[i]; c == '\\' || c == '"' || c == '\n' {
			return true
		}
	}
	return false
}

// escapeHelp writes a help text escaped as the text format wants.
func escapeHelp(b *bytes.Buffer, help string) {
	b.WriteString(strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(help))
}

// family is f as a message; its series are f's, in f's order.
func (f *scopedFamily) family() *dto.MetricFamily {
	typ := f.typ
	out := &dto.MetricFamily{Name: &f.name, Help: &f.help, Type: &typ, Metric: make([]*dto.Metric, 0, f.n)}
	for r := range f.series {
		labels := []*dto.LabelPair{{Name: &scopeLabelName, Value: &r.scope}}
		if f.label != "" {
			labels = append(labels, &dto.LabelPair{Name: &f.label, Value: &r.value})
			slices.SortFunc(labels, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
		}
		v := float64(r.n)
		m := &dto.Metric{Label: labels}
		if typ == dto.MetricType_COUNTER {
			m.Counter = &dto.Counter{Value: &v}
		} else {
			m.Gauge = &dto.Gauge{Value: &v}
		}
		out.Metric = append(out.Metric, m)
	}
	return out
}

var scopeLabelName = labelScope

// scopeCounter is a counter family labelled by scope and one label more (routes by
// source, route errors by code), kept by scope: an increment is a map read, a look
// through a scope's one or two counters and an atomic add, a deleted scope's counters
// go with one map delete, and a rendering writes them without the registry. A scope
// costs a map entry and its counters, not a map of its own (docs/performance.md,
// "Per-scope memory").
type scopeCounter struct {
	name, help, label string
	mu                sync.RWMutex
	byScope           map[string][]*scopeCount
}

// scopeCount is one counter of a scopeCounter: the value of its second label, its
// count and, for the route counter, the latency series its routes observe too.
type scopeCount struct {
	value string
	n     atomic.Int64
	took  prometheus.Observer
}

func newScopeCounter(name, help, label string) *scopeCounter {
	return &scopeCounter{name: name, help: help, label: label, byScope: map[string][]*scopeCount{}}
}

// counter is the counter of scope and value, made on its first use (made true), when
// init, if any, fills it before anyone else sees it.
func (c *scopeCounter) counter(scope, value string, init func(*scopeCount)) (n *scopeCount, made bool) {
	c.mu.RLock()
	n = findCount(c.byScope[scope], value)
	c.mu.RUnlock()
	if n != nil {
		return n, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	counts := c.byScope[scope]
	if n = findCount(counts, value); n != nil {
		return n, false
	}
	n = &scopeCount{value: value}
	if init != nil {
		init(n)
	}
	if counts == nil {
		// The caller's scope may be a slice of a longer string (a request's path),
		// which the key would keep whole.
		scope = strings.Clone(scope)
	}
	// A new array when it grows: readers of the old one hold the read lock, so none
	// reads while this writes.
	c.byScope[scope] = append(counts, n)
	return n, true
}

func findCount(counts []*scopeCount, value string) *scopeCount {
	for _, n := range counts {
		if n.value == value {
			return n
		}
	}
	return nil
}

// keep forgets the counters of the scopes not in live, but those of scope "" (the
// route errors of names that are no scope).
func (c *scopeCounter) keep(live map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for scope := range c.byScope {
		if scope != "" && !live[scope] {
			delete(c.byScope, scope)
		}
	}
}

// family is the counters now, sorted by scope and value.
func (c *scopeCounter) family() *scopedFamily {
	var rows []scopedRow
	c.mu.RLock()
	for scope, counts := range c.byScope {
		for _, n := range counts {
			rows = append(rows, scopedRow{scope: scope, value: n.value, n: n.n.Load()})
		}
	}
	c.mu.RUnlock()
	slices.SortFunc(rows, func(a, b scopedRow) int {
		return cmp.Or(strings.Compare(a.scope, b.scope), strings.Compare(a.value, b.value))
	})
	return &scopedFamily{name: c.name, help: c.help, typ: dto.MetricType_COUNTER, label: c.label, series: slices.Values(rows), n: len(rows)}
}

package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"

	"github.com/warmpool/warmpool"
)

// WriteSVG plots the results, one panel a trace: each policy a point at its idle
// pod-seconds per served session (x) and its share of warm routes (y), the static
// policies joined in order of min_idle_pods, demand marked apart (better is up and to
// the left); under them, the demand policy's run of each trace over time.
func (r *PoolTraceResults) WriteSVG(out io.Writer) error {
	const pw, ph, pad, top = 220.0, 200.0, 40.0, 30.0
	var names []string
	by := map[string][]TraceResult{}
	for _, x := range r.Results {
		if _, ok := by[x.Trace]; !ok {
			names = append(names, x.Trace)
		}
		by[x.Trace] = append(by[x.Trace], x)
	}
	width := float64(len(names))*(pw+pad) + pad
	w := new(strings.Builder) // one write to out, whose error is the one to check
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", width, 2*(ph+top+pad)+pad)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="%.0f" y="16" font-size="13">warm routes (y, %%) against idle pod-seconds per served session (x); static: grey, by min_idle_pods; demand: red, d + its min_idle_pods. Below, demand (min_idle_pods 0) over time: arrivals in the last 4 s (grey), target_idle (red), idle pods (blue)</text>`+"\n", pad)
	for i, name := range names {
		xs := by[name]
		x0, y0 := pad+float64(i)*(pw+pad), top+10
		maxX := 0.0
		minY := 100.0
		for _, x := range xs {
			maxX = math.Max(maxX, x.IdlePerSession())
			minY = math.Min(minY, 100*x.WarmShare())
		}
		maxX = niceCeil(maxX)
		minY = math.Max(0, math.Floor(minY/10)*10)
		px := func(v float64) float64 { return x0 + v/math.Max(maxX, 1e-9)*pw }
		py := func(v float64) float64 { return y0 + ph - (v-minY)/math.Max(100-minY, 1e-9)*ph }
		fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0, y0, pw, ph)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" font-weight="bold">%s</text>`+"\n", x0, y0-4, html.EscapeString(name))
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f">0</text><text x="%.1f" y="%.1f" text-anchor="end">%.2g</text>`+"\n", x0, y0+ph+14, x0+pw, y0+ph+14, maxX)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end">100</text><text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n", x0-3, y0+8, x0-3, y0+ph, minY)
		if y95 := py(95); y95 > y0 && y95 < y0+ph {
			fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#6a6" stroke-dasharray="4 3"/>`+"\n", x0, y95, x0+pw, y95)
		}
		var path string
		for _, x := range xs {
			if x.Policy == warmpool.WarmStatic {
				path += fmt.Sprintf("%.1f,%.1f ", px(x.IdlePerSession()), py(100*x.WarmShare()))
			}
		}
		fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="#aaa"/>`+"\n", path)
		for _, x := range xs {
			cx, cy := px(x.IdlePerSession()), py(100*x.WarmShare())
			if x.Policy == warmpool.WarmDemand {
				fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="5" fill="#d22"/><text x="%.1f" y="%.1f" fill="#d22">d%d</text>`+"\n", cx, cy, cx+7, cy+4, x.MinIdle)
				continue
			}
			fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="#555"/><text x="%.1f" y="%.1f" fill="#555">%d</text>`+"\n", cx, cy, cx+5, cy-5, x.MinIdle)
		}
	}
	for i, name := range names {
		for _, x := range by[name] {
			if x.Policy == warmpool.WarmDemand && x.MinIdle == 0 {
				seriesPanel(w, x, pad+float64(i)*(pw+pad), 2*top+ph+pad+10, pw, ph)
			}
		}
	}
	fmt.Fprintln(w, "</svg>")
	_, err := io.WriteString(out, w.String())
	return err
}

// seriesPanel plots the demand policy's run of one trace over time: arrivals over the
// last lead time (4 s, grey), target_idle (red) and idle pods (blue).
func seriesPanel(w *strings.Builder, x TraceResult, x0, y0, pw, ph float64) {
	const lead = 4
	arr := make([]int, len(x.Series))
	top := 1
	for i, s := range x.Series {
		for j := max(0, i-lead+1); j <= i; j++ {
			arr[i] += x.Series[j].Arrivals
		}
		top = max(top, arr[i], s.Idle, s.Target)
	}
	ymax := niceCeil(float64(top))
	n := math.Max(1, float64(len(x.Series)-1))
	line := func(color string, v func(i int) int) {
		var pts string
		for i := range x.Series {
			pts += fmt.Sprintf("%.1f,%.1f ", x0+float64(i)/n*pw, y0+ph-float64(v(i))/ymax*ph)
		}
		fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="%s"/>`+"\n", pts, color)
	}
	fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0, y0, pw, ph)
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" font-weight="bold">%s, demand over %d s</text>`+"\n", x0, y0-4, html.EscapeString(x.Trace), len(x.Series))
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end">%.0f</text><text x="%.1f" y="%.1f" text-anchor="end">0</text>`+"\n", x0-3, y0+8, ymax, x0-3, y0+ph)
	line("#bbb", func(i int) int { return arr[i] })
	line("#36c", func(i int) int { return x.Series[i].Idle })
	line("#d22", func(i int) int { return x.Series[i].Target })
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

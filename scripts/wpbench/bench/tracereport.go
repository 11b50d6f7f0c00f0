package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/warmpool/warmpool"
)

// label is a policy's name in the table and the plot.
func (r TraceResult) label() string {
	if r.Policy == warmpool.WarmDemand {
		return "demand " + strconv.Itoa(r.MinIdle)
	}
	return "static " + strconv.Itoa(r.MinIdle)
}

// WriteText writes the table of results, trace by trace, and the goals.
func (r *PoolTraceResults) WriteText(out io.Writer) error {
	w := new(strings.Builder) // one write to out, whose error is the one to check
	fmt.Fprintf(w, "| trace | policy | routes | warm %% | failed | idle pod-s | idle pod-s / session | mean idle | max idle | mean target | max target | settled target | settled idle |\n")
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Results {
		fmt.Fprintf(w, "| %s | %s | %d | %.1f | %d | %.0f | %.2f | %.2f | %d | %.2f | %d | %.2f | %.2f |\n", x.Trace, x.label(), x.Routes, 100*x.WarmShare(),
			x.Failed, x.IdlePodS, x.IdlePerSession(), x.MeanIdle, x.MaxIdle, x.MeanTarget, x.MaxTarget, x.SettledTarget, x.SettledIdle)
	}
	fmt.Fprintln(w)
	for _, g := range r.Goals() {
		fmt.Fprintln(w, "- "+g)
	}
	_, err := io.WriteString(out, w.String())
	return err
}

// Goals says for each goal of docs/performance.md whether the run met it, with its
// numbers.
func (r *PoolTraceResults) Goals() []string {
	var out []string
	by := map[string][]TraceResult{}
	for _, x := range r.Results {
		by[x.Trace] = append(by[x.Trace], x)
	}
	for _, name := range []string{"ramp", "diurnal"} {
		for _, d := range by[name] {
			if d.Policy != warmpool.WarmDemand {
				continue
			}
			line := fmt.Sprintf("%s: %s serves %.1f %% warm (goal ≥ 95 %%: %s); %.0f idle pod-s", name, d.label(), 100*d.WarmShare(),
				metMissed(d.WarmShare() >= 0.95), d.IdlePodS)
			for _, bar := range []float64{d.WarmShare(), 0.95} {
				if c := cheapestStatic(by[name], bar); c != nil {
					line += fmt.Sprintf("; against %.0f for %s, the cheapest static setting at least %.1f %% warm (goal ≤: %s)",
						c.IdlePodS, c.label(), 100*bar, metMissed(d.IdlePodS <= c.IdlePodS))
				} else {
					line += fmt.Sprintf("; no static setting reached %.1f %%", 100*bar)
				}
			}
			out = append(out, line)
		}
	}
	for _, x := range by["steady"] {
		if x.Policy == warmpool.WarmDemand {
			out = append(out, fmt.Sprintf("steady: once settled (after two mean session lengths) %s keeps a target of %.2f on average, at most min_idle_pods + 1 = %d %.0f %% of the time (goal, on the settled mean target: %s); over the whole trace %.2f (at most %d), from the start of an empty pool; idle pods %.2f settled, %.2f over the whole trace",
				x.label(), x.SettledTarget, x.MinIdle+1, 100*x.SettledWithin, metMissed(x.SettledTarget <= float64(x.MinIdle+1)), x.MeanTarget, x.MaxTarget, x.SettledIdle, x.MeanIdle))
		}
	}
	return out
}

// cheapestStatic is the static result of xs with the fewest idle pod-seconds among
// those at least share warm, nil when none is.
func cheapestStatic(xs []TraceResult, share float64) *TraceResult {
	var c *TraceResult
	for i, x := range xs {
		if x.Policy == warmpool.WarmStatic && x.WarmShare() >= share && (c == nil || x.IdlePodS < c.IdlePodS) {
			c = &xs[i]
		}
	}
	return c
}

func metMissed(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

package bench

import (
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
)

func numCPU() int { return runtime.NumCPU() }

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// oneLine sums a phase up for the progress log.
func (p *Phase) oneLine() string {
	s := fmt.Sprintf("%s %.0fs: replica CPU %.2fs (%.1f%% of a core), redis %.0f cmds/s (%.0f beyond probes), redis CPU %.2fs, due tick mean %.1fms, RSS %.1f MB, load %s",
		p.Name, p.Seconds, p.ReplicaCPU, 100*p.ReplicaCPU/p.Seconds, p.CommandsPS, p.BeyondProbesPS, p.RedisCPU, p.Sweeps["due"].MeanMs, mb(p.RSS), p.LoadAvg)
	if r := p.Route; r != nil {
		s += fmt.Sprintf("; %d routes (%d errors) p50 %.2fms p99 %.2fms", r.Routes, r.Errors, r.P50Ms, r.P99Ms)
		if r.FirstError != "" {
			s += "; first error: " + r.FirstError
		}
	}
	return s
}

// top lists the largest rates of m, "name rate" pairs, largest first.
func top(m map[string]float64, n int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var parts []string
	for i, k := range keys {
		if i == n {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s", k, rate(m[k])))
	}
	return strings.Join(parts, ", ")
}

func rate(v float64) string {
	if v >= 10 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// bound writes a SweepStats.MaxMs: +Inf for the bucket past the last bound.
func bound(ms float64) string {
	if ms < 0 {
		return "+Inf"
	}
	return fmt.Sprintf("%.0f", ms)
}

// perScopeLine is what each scope cost the replica and Redis at the end of p.
func (s *Size) perScopeLine(p *Phase) string {
	rss, anon, redis := s.PerScope(p)
	return fmt.Sprintf("per scope after %s: replica RSS %.0f B (anonymous %.0f B); Redis %.0f B", p.Name, rss, anon, redis)
}

func sweeps(p *Phase) string {
	var parts []string
	for _, k := range []string{"due", "watch", "reconcile"} {
		if s := p.Sweeps[k]; s.Runs > 0 {
			parts = append(parts, fmt.Sprintf("%s %d× mean %.1f ms (max ≤ %s ms)", k, s.Runs, s.MeanMs, bound(s.MaxMs)))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// WriteMarkdown writes the results as the tables of docs/performance.md.
func (r *ScaleResults) WriteMarkdown(out io.Writer) error {
	w := new(strings.Builder) // one write to out, whose error is the one to check
	fmt.Fprintf(w, "Scale run of %s on %s; P = %d pod(s) and N = %d session(s) per scope; routing phase: affinity routes of random bound sessions at %.0f/s.\n\n",
		r.Started.Format("2006-01-02 15:04 UTC"), r.Machine, r.Pods, r.Sessions, r.Rate)
	fmt.Fprintln(w, "| S | phase | s | replica CPU s (% of a core) | Redis cmds/s (beyond probes) | Redis CPU s | due tick mean / max ≤ ms | route p50 / p99 ms | replica RSS MB | load avg |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range r.Sizes {
		for _, p := range []*Phase{s.Idle, s.Routing} {
			if p == nil {
				continue
			}
			route := "—"
			if p.Route != nil {
				route = fmt.Sprintf("%.2f / %.2f (%d routes, %d errors)", p.Route.P50Ms, p.Route.P99Ms, p.Route.Routes, p.Route.Errors)
			}
			d := p.Sweeps["due"]
			fmt.Fprintf(w, "| %d | %s | %.0f | %.2f (%.1f %%) | %s (%s) | %.2f | %.1f / %s | %s | %.1f | %s |\n",
				s.Scopes, p.Name, p.Seconds, p.ReplicaCPU, 100*p.ReplicaCPU/p.Seconds, rate(p.CommandsPS), rate(p.BeyondProbesPS),
				p.RedisCPU, d.MeanMs, bound(d.MaxMs), route, mb(p.RSS), p.LoadAvg)
		}
	}
	fmt.Fprintln(w, "\n| S | replica fresh: RSS (anonymous) MB | phase | RSS (anonymous) MB | per scope: replica RSS (anonymous) bytes | Redis bytes per scope |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, s := range r.Sizes {
		for _, p := range []*Phase{s.Idle, s.Routing} {
			if p == nil {
				continue
			}
			rss, anon, redis := s.PerScope(p)
			fmt.Fprintf(w, "| %d | %.1f (%.1f) | %s | %.1f (%.1f) | %.0f (%.0f) | %.0f |\n", s.Scopes, mb(s.FreshRSS), mb(s.FreshAnon),
				p.Name, mb(p.RSS), mb(p.Anon), rss, anon, redis)
		}
	}
	fmt.Fprintln(w, "\n| S | configs stored | sessions bound | Redis bytes per scope: config / with pods and sessions | scopes still due within a minute after 3 min | one /metrics scrape |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, s := range r.Sizes {
		fmt.Fprintf(w, "| %d | %.1f s | %.1f s | %.0f / %.0f | %d | %.1f MB in %.1f s |\n", s.Scopes, s.ConfigSeconds, s.RouteSeconds,
			s.ConfigBytesPerScope, s.BytesPerScope, s.Unsettled, mb(s.MetricsBytes), s.MetricsSeconds)
	}
	fmt.Fprintln(w, "\nWhere the commands and the sweep time go (per second; scripts as the replica counted its calls):")
	fmt.Fprintln(w)
	for _, s := range r.Sizes {
		for _, p := range []*Phase{s.Idle, s.Routing} {
			if p == nil {
				continue
			}
			fmt.Fprintf(w, "- S=%d %s: commands: %s; scripts: %s; sweeps: %s\n", s.Scopes, p.Name, top(p.Commands, 8), top(p.Scripts, 6), sweeps(p))
		}
	}
	if pc := r.Pass; pc != nil {
		fmt.Fprintf(w, "\nRoute latency at S=%d, %.0f affinity routes/s:\n\n", pc.Scopes, r.Rate)
		fmt.Fprintln(w, "| sweeps | routes | p50 ms | p99 ms | max ms | replica CPU s | full passes (mean / max ≤ ms) | load avg |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
		for _, p := range []*Phase{pc.Off, pc.NoPass, pc.On} {
			if p == nil || p.Route == nil {
				continue
			}
			rc := p.Sweeps["reconcile"]
			fmt.Fprintf(w, "| %s | %d | %.2f | %.2f | %.1f | %.2f | %d (%.0f / %s) | %s |\n", p.Name, p.Route.Routes, p.Route.P50Ms, p.Route.P99Ms, p.Route.MaxMs,
				p.ReplicaCPU, rc.Runs, rc.MeanMs, bound(rc.MaxMs), p.LoadAvg)
		}
		if pc.Off != nil && pc.On != nil && pc.Off.Route.P99Ms > 0 {
			fmt.Fprintf(w, "\np99 during full passes / p99 with sweeps off: %.2f\n", pc.On.Route.P99Ms/pc.Off.Route.P99Ms)
		}
		if pc.NoPass != nil && pc.On != nil && pc.NoPass.Route.P99Ms > 0 {
			fmt.Fprintf(w, "p99 during full passes / p99 with the other sweeps only: %.2f\n", pc.On.Route.P99Ms/pc.NoPass.Route.P99Ms)
		}
	}
	if rs := r.RSS; rs != nil {
		fmt.Fprintf(w, "\nReplica RSS while sessions are bound (%d scopes of one pod; full pass every 5 s):\n\n", rs.Scopes)
		fmt.Fprintln(w, "| sessions | replica RSS MB | anonymous / file-backed MB | Redis used_memory MB |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, st := range rs.Steps {
			fmt.Fprintf(w, "| %d | %.1f | %.1f / %.1f | %.1f |\n", st.Sessions, mb(st.RSS), mb(st.Anon), mb(st.File), mb(st.UsedMemory))
		}
		fmt.Fprintf(w, "| held %.0f s (max sampled) | %.1f | | |\n", rs.Hold.Seconds, mb(rs.HoldMaxRSS))
		lo, hi := rs.Steps[0].RSS, rs.HoldMaxRSS
		for _, st := range rs.Steps {
			lo, hi = min(lo, st.RSS), max(hi, st.RSS)
		}
		fmt.Fprintf(w, "\nRSS range %.1f–%.1f MB (spread %.1f MB); Redis bytes per bound session: %.0f; hold: %s\n", mb(lo), mb(hi), mb(hi-lo), rs.BytesPerSession, rs.Hold.oneLine())
	}
	_, err := io.WriteString(out, w.String())
	return err
}

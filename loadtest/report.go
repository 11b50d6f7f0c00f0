package loadtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// WriteJSON writes the results as indented JSON.
func (r *Results) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteFiles writes results.json and report.html into dir (created if missing) and
// returns their paths.
func (r *Results) WriteFiles(dir string) (jsonPath, htmlPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	jsonPath, htmlPath = filepath.Join(dir, "results.json"), filepath.Join(dir, "report.html")
	write := func(path string, fn func(io.Writer) error) error {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			return errors.Join(err, f.Close())
		}
		return f.Close()
	}
	if err := write(jsonPath, r.WriteJSON); err != nil {
		return "", "", err
	}
	if err := write(htmlPath, r.WriteHTML); err != nil {
		return "", "", err
	}
	return jsonPath, htmlPath, nil
}

// WriteSummary writes a plain-text summary: per scenario, per call kind, the
// throughput, latency quantiles and outcomes, then the scenario's own figures.
func (r *Results) WriteSummary(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "warmpool loadtest against %s, %s (%s)\n", r.Server, r.Started.Format("2006-01-02 15:04:05 MST"),
		r.Finished.Sub(r.Started).Round(100_000_000))
	for _, s := range r.Scenarios {
		fmt.Fprintf(&b, "\n== %s  scopes %s  pool pc=%d mc=%d\n", s.Name, strings.Join(s.Scopes, ","),
			s.Pool.PodConcurrency, s.Pool.MaxConcurrency)
		fmt.Fprintf(&b, "   %d requests in %.2fs = %.0f/s, %d not 2xx\n", s.Requests, s.Seconds, s.RPS, s.Errors)
		fmt.Fprintf(&b, "   %-6s %8s %9s %9s %9s %9s %9s  %s\n", "call", "count", "rps", "p50 ms", "p90 ms", "p99 ms", "max ms", "outcomes")
		for _, c := range s.Calls {
			fmt.Fprintf(&b, "   %-6s %8d %9.1f %9.3f %9.3f %9.3f %9.3f  %s\n", c.Kind, c.Count, c.RPS,
				c.Latency.P50, c.Latency.P90, c.Latency.P99, c.Latency.Max, outcomesText(c.Outcomes))
		}
		switch {
		case s.Warm != nil:
			w := s.Warm
			fmt.Fprintf(&b, "   mode %s, %d sessions, %d workers, target rate %s; %d warm pods (%.1fs); deploys during the run: %d; cycles %d\n",
				w.Mode, w.Sessions, w.Workers, rateText(w.TargetRate), w.WarmPods, w.WarmupSeconds, w.DeploysDuring, w.Cycles)
		case s.Cold != nil:
			c := s.Cold
			for i, br := range c.Bursts {
				fmt.Fprintf(&b, "   burst %d: N=%d served %d in %.1f ms%s; pods %d (distinct %d, expected %d); %s\n",
					i+1, br.N, br.Served, br.WallMs, ratioText(br.WallOverDelay), br.PoolPods, br.DistinctPods,
					c.ExpectedDeploys, outcomesText(br.Outcomes))
			}
			fmt.Fprintf(&b, "   all served: %v; deploys as expected: %v\n", c.AllServed, c.DeploysAsExpected)
		case s.Queued != nil:
			q := s.Queued
			fmt.Fprintf(&b, "   capacity %d (pc %d), queue %d, wait %ds, %d clients holding %.0f ms\n",
				q.Capacity, q.PodConcurrency, q.QueueSize, q.WaitTimeoutS, q.Clients, q.HoldMs)
			fmt.Fprintf(&b, "   served %d (%.1f/s of at most %.1f/s), QUEUE_FULL %d, WAIT_TIMEOUT %d, failed %d\n",
				q.Served, q.ServedPerSec, q.CapacityPerSec, q.QueueFull, q.WaitTimeout, q.Failed)
			fmt.Fprintf(&b, "   queue wait p50 %.2f ms p90 %.2f ms p99 %.2f ms max %.2f ms; max waiters %d, pods %d, sessions %d\n",
				q.QueueWait.P50, q.QueueWait.P90, q.QueueWait.P99, q.QueueWait.Max, q.MaxWaiters, q.MaxPodsSeen, q.MaxSessions)
		}
		for _, n := range s.Notes {
			fmt.Fprintf(&b, "   NOTE: %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func rateText(r float64) string {
	if r <= 0 {
		return "flat out"
	}
	return fmt.Sprintf("%.0f/s", r)
}

func ratioText(r float64) string {
	if r <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%.2f × deploy delay)", r)
}

// outcomesText lists outcome counts, most frequent first: "200×120 503 QUEUE_FULL×3".
func outcomesText(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s×%d", k, m[k])
	}
	return strings.Join(parts, "  ")
}

// --- HTML --------------------------------------------------------------------

// histRow is one bucket of a scenario's histogram, with a cell per call kind.
type histRow struct {
	Range string
	Cells []histCell
}

type histCell struct {
	Count uint64
	Pct   float64 // of the kind's calls
	Width float64 // bar width, % of the kind's largest bucket
}

type barCol struct {
	Second       int
	Requests     int
	Errors       int
	OKHeight     float64 // % of the chart's height
	ErrorsHeight float64
}

type htmlScenario struct {
	*ScenarioResult
	Kinds    []string
	Hist     []histRow
	Bars     []barCol
	BarMax   int
	BarWidth int // px per second column
	PlotHTML string
}

func bucketLabel(b Bucket) string {
	f := func(v float64) string {
		switch {
		case v == 0:
			return "0"
		case v < 1:
			return fmt.Sprintf("%gµs", v*1000)
		case v < 1000:
			return fmt.Sprintf("%gms", v)
		}
		return fmt.Sprintf("%gs", v/1000)
	}
	if b.ToMs == 0 {
		return "≥ " + f(b.FromMs)
	}
	return f(b.FromMs) + " – " + f(b.ToMs)
}

func newHTMLScenario(s *ScenarioResult) htmlScenario {
	h := htmlScenario{ScenarioResult: s, PlotHTML: string(s.plotHTML)}
	// Histogram rows from the first to the last non-empty bucket of any kind.
	lo, hi := -1, -1
	for _, c := range s.Calls {
		h.Kinds = append(h.Kinds, c.Kind)
		for i, b := range c.Histogram {
			if b.Count > 0 {
				if lo < 0 || i < lo {
					lo = i
				}
				hi = max(hi, i)
			}
		}
	}
	if lo >= 0 {
		for i := lo; i <= hi; i++ {
			row := histRow{Range: bucketLabel(s.Calls[0].Histogram[i])}
			for _, c := range s.Calls {
				var top uint64
				for _, b := range c.Histogram {
					top = max(top, b.Count)
				}
				cell := histCell{Count: c.Histogram[i].Count}
				if c.Count > 0 {
					cell.Pct = 100 * float64(cell.Count) / float64(c.Count)
				}
				if top > 0 {
					cell.Width = 100 * float64(cell.Count) / float64(top)
				}
				row.Cells = append(row.Cells, cell)
			}
			h.Hist = append(h.Hist, row)
		}
	}
	for _, t := range s.Timeline {
		h.BarMax = max(h.BarMax, t.Requests)
	}
	if n := len(s.Timeline); n > 0 {
		h.BarWidth = min(40, max(2, 1200/n-2))
	}
	for i, t := range s.Timeline {
		col := barCol{Second: i, Requests: t.Requests, Errors: t.Errors}
		if h.BarMax > 0 {
			col.OKHeight = 100 * float64(t.Requests-t.Errors) / float64(h.BarMax)
			col.ErrorsHeight = 100 * float64(t.Errors) / float64(h.BarMax)
		}
		h.Bars = append(h.Bars, col)
	}
	return h
}

// WriteHTML writes the report: per scenario, the summary tables, a latency histogram
// per call kind, the calls per second, and vegeta's interactive latency time series.
func (r *Results) WriteHTML(w io.Writer) error {
	data := struct {
		*Results
		Scenarios []htmlScenario
	}{Results: r}
	for _, s := range r.Scenarios {
		data.Scenarios = append(data.Scenarios, newHTMLScenario(s))
	}
	return reportTemplate.Execute(w, data)
}

var reportTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"outcomes": outcomesText,
	"rate":     rateText,
	"f1":       func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"f2":       func(v float64) string { return fmt.Sprintf("%.2f", v) },
	"f3":       func(v float64) string { return fmt.Sprintf("%.3f", v) },
	"pct":      func(v float64) string { return fmt.Sprintf("%.1f%%", v) },
	"css":      func(v float64) template.CSS { return template.CSS(fmt.Sprintf("%.2f%%", v)) },
	"px":       func(v float64) template.CSS { return template.CSS(fmt.Sprintf("%.1fpx", v)) },
	"tlwidth": func(h htmlScenario) template.CSS {
		return template.CSS(fmt.Sprintf("%dpx", len(h.Bars)*(h.BarWidth+2)+8))
	},
	"time":  func(r *Results) string { return r.Started.Format("2006-01-02 15:04:05 MST") },
	"took":  func(r *Results) string { return r.Finished.Sub(r.Started).Round(100_000_000).String() },
	"join":  strings.Join,
	"mul":   func(a, b float64) float64 { return a * b },
	"float": func(i int) float64 { return float64(i) },
}).Parse(reportHTML))

const reportHTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>warmpool loadtest — {{time .Results}}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 24px; color: #1f2937; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 36px 0 8px; padding-top: 12px; border-top: 2px solid #e5e7eb; }
h3 { font-size: 15px; margin: 20px 0 6px; color: #374151; }
.meta { color: #6b7280; margin-bottom: 8px; }
table { border-collapse: collapse; margin: 6px 0 10px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e5e7eb; text-align: right; white-space: nowrap; }
th { background: #f9fafb; font-weight: 600; }
td.l, th.l { text-align: left; }
td.o { text-align: left; white-space: normal; max-width: 520px; font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }
.kv td:first-child { text-align: left; color: #6b7280; }
.kv td { text-align: left; }
.note { background: #fef3c7; border-left: 4px solid #f59e0b; padding: 6px 10px; margin: 6px 0; }
.good { color: #047857; font-weight: 600; }
.bad { color: #b91c1c; font-weight: 600; }
.hist td.bar { width: 290px; text-align: left; padding: 2px 6px; }
.hist td.bar div { background: #60a5fa; height: 16px; display: inline-block; vertical-align: middle; }
.hist td.bar span { font-size: 12px; color: #374151; margin-left: 6px; vertical-align: middle; }
.tl { display: flex; align-items: flex-end; gap: 2px; height: 140px; border-left: 1px solid #9ca3af; border-bottom: 1px solid #9ca3af; padding: 0 4px; min-width: 240px; }
.tl .col { flex: none; display: flex; flex-direction: column-reverse; height: 100%; }
.tl .ok { background: #34d399; }
.tl .err { background: #f87171; }
.tlaxis { display: flex; justify-content: space-between; min-width: 240px; color: #6b7280; font-size: 12px; padding-left: 4px; }
.legend span { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 12px; }
iframe { width: 100%; max-width: 1400px; height: 700px; border: 1px solid #e5e7eb; border-radius: 8px; }
</style>
</head>
<body>
<h1>warmpool load test</h1>
<div class="meta">server <b>{{.Server}}</b> · started {{time .Results}} · took {{took .Results}} ·
client {{.Client.NumCPU}} CPUs, {{.Client.CPUModel}}, {{.Client.GoVersion}}</div>
<div class="meta">scenarios {{join .Options.Scenarios ", "}} · measured time {{.Options.DurationS}} s per warm / queued run ·
scope prefix {{.Options.ScopePrefix}} · request timeout {{.Options.TimeoutS}} s</div>

{{range .Scenarios}}
<h2 id="{{.Name}}">{{.Name}}</h2>
<div class="meta">scope{{if gt (len .Scopes) 1}}s{{end}} {{join .Scopes ", "}} · pod_concurrency {{.Pool.PodConcurrency}} ·
max_concurrency {{.Pool.MaxConcurrency}}{{if .Pool.QueueSize}} · queue_size {{.Pool.QueueSize}} · wait_timeout_s {{.Pool.WaitTimeoutS}}{{end}}</div>
{{range .Notes}}<div class="note">{{.}}</div>{{end}}

<table>
<tr><th class="l">call</th><th>count</th><th>2xx</th><th>per s</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th><th class="l">outcomes (status, error code)</th></tr>
{{range .Calls}}<tr><td class="l"><b>{{.Kind}}</b></td><td>{{.Count}}</td><td>{{.OK}}</td><td>{{f1 .RPS}}</td>
<td>{{f3 .Latency.P50}}</td><td>{{f3 .Latency.P90}}</td><td>{{f3 .Latency.P99}}</td><td>{{f3 .Latency.Max}}</td><td class="o">{{outcomes .Outcomes}}</td></tr>
{{end}}<tr><td class="l">all</td><td>{{.Requests}}</td><td>{{len .Calls | printf "%d kinds"}}</td><td>{{f1 .RPS}}</td><td colspan="5" class="l">{{f2 .Seconds}} s measured, {{.Errors}} not 2xx</td></tr>
</table>

{{with .Warm}}
<table class="kv">
<tr><td>mode</td><td>{{.Mode}}{{if eq .Mode "cycle"}} (route → touch × {{.Touches}} → end){{end}}</td></tr>
<tr><td>sessions / workers</td><td>{{.Sessions}} / {{.Workers}}</td></tr>
<tr><td>target rate</td><td>{{rate .TargetRate}}</td></tr>
<tr><td>warm pods before the run</td><td>{{.WarmPods}} (ready in {{f2 .WarmupSeconds}} s)</td></tr>
<tr><td>pods before → after</td><td>{{.PodsBefore}} → {{.PodsAfter}}; deployed during the run: <span class="{{if .DeploysDuring}}bad{{else}}good{{end}}">{{.DeploysDuring}}</span></td></tr>
{{if eq .Mode "cycle"}}<tr><td>completed cycles</td><td>{{.Cycles}}</td></tr>{{end}}
</table>
{{end}}

{{with .Cold}}
<h3>Bursts: N concurrent routes on a fresh scope (expected deploys ceil(N / pod_concurrency) = {{.ExpectedDeploys}})</h3>
<table>
<tr><th class="l">scope</th><th>N</th><th>served</th><th>wall ms</th>{{if .DeployDelayMs}}<th>wall / deploy delay ({{.DeployDelayMs}} ms)</th>{{end}}<th>pods in pool</th><th>distinct pods answered</th><th>placeholders left</th><th class="l">outcomes</th></tr>
{{$c := .}}{{range .Bursts}}<tr><td class="l">{{.Scope}}</td><td>{{.N}}</td><td class="{{if eq .Served .N}}good{{else}}bad{{end}}">{{.Served}}</td><td>{{f1 .WallMs}}</td>
{{if $c.DeployDelayMs}}<td>{{f2 .WallOverDelay}}</td>{{end}}<td class="{{if eq .PoolPods $c.ExpectedDeploys}}good{{else}}bad{{end}}">{{.PoolPods}}</td><td>{{.DistinctPods}}</td><td>{{.Placeholders}}</td><td class="o">{{outcomes .Outcomes}}</td></tr>
{{end}}</table>
<div>wall time min / mean / max: {{f1 .WallMinMs}} / {{f1 .WallMeanMs}} / {{f1 .WallMaxMs}} ms ·
all served: <span class="{{if .AllServed}}good{{else}}bad{{end}}">{{.AllServed}}</span> ·
deploys as expected: <span class="{{if .DeploysAsExpected}}good{{else}}bad{{end}}">{{.DeploysAsExpected}}</span></div>
{{end}}

{{with .Queued}}
<table class="kv">
<tr><td>capacity</td><td>max_concurrency {{.Capacity}}, pod_concurrency {{.PodConcurrency}} → {{.MaxPods}} pods (warm in {{f2 .WarmupSeconds}} s)</td></tr>
<tr><td>queue</td><td>queue_size {{.QueueSize}}, wait_timeout_s {{.WaitTimeoutS}}</td></tr>
<tr><td>clients</td><td>{{.Clients}}, each holding its session {{.HoldMs}} ms, then ending it</td></tr>
<tr><td>routes</td><td>served {{.Served}} · QUEUE_FULL {{.QueueFull}} · WAIT_TIMEOUT {{.WaitTimeout}} · other failures <span class="{{if .Failed}}bad{{else}}good{{end}}">{{.Failed}}</span></td></tr>
<tr><td>served per second</td><td>{{f1 .ServedPerSec}} (capacity / hold = {{f1 .CapacityPerSec}})</td></tr>
<tr><td>queue wait (served routes)</td><td>p50 {{f2 .QueueWait.P50}} ms · p90 {{f2 .QueueWait.P90}} ms · p99 {{f2 .QueueWait.P99}} ms · max {{f2 .QueueWait.Max}} ms</td></tr>
<tr><td>pool samples ({{.Samples}})</td><td>max waiters {{.MaxWaiters}} · max pods + placeholders {{.MaxPodsSeen}} · max sessions {{.MaxSessions}}</td></tr>
</table>
{{end}}

{{if .Hist}}
<h3>Latency histogram</h3>
<table class="hist">
<tr><th class="l">latency</th>{{range .Kinds}}<th class="l">{{.}}</th>{{end}}</tr>
{{range .Hist}}<tr><td class="l">{{.Range}}</td>{{range .Cells}}<td class="bar"><div style="width: {{px (mul .Width 1.8)}}"></div><span>{{.Count}}{{if .Count}} ({{pct .Pct}}){{end}}</span></td>{{end}}</tr>
{{end}}</table>
{{end}}

{{if .Bars}}
<h3>Calls started per second <span class="legend"><span class="ok" style="background:#34d399"></span>2xx<span style="background:#f87171"></span>not 2xx</span></h3>
{{$w := .BarWidth}}<div class="tl" style="width: {{tlwidth .}}">{{range .Bars}}<div class="col" style="width: {{px (float $w)}}" title="second {{.Second}}: {{.Requests}} calls, {{.Errors}} not 2xx"><div class="ok" style="height: {{css .OKHeight}}"></div><div class="err" style="height: {{css .ErrorsHeight}}"></div></div>{{end}}</div>
<div class="tlaxis" style="width: {{tlwidth .}}"><span>0 s</span><span>peak {{.BarMax}} calls/s</span><span>{{len .Bars}} s</span></div>
{{end}}

{{if .PlotHTML}}
<h3>Latency over time (vegeta plot; drag to zoom)</h3>
<iframe title="latency over time: {{.Name}}" srcdoc="{{.PlotHTML}}"></iframe>
{{end}}
{{end}}
</body>
</html>
`

package loadtest

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"
)

// The call kinds.
const (
	KindRoute = "route"
	KindTouch = "touch"
	KindEnd   = "end"
)

// kindOrder is the order call kinds are reported in.
var kindOrder = []string{KindRoute, KindTouch, KindEnd}

// histogramBuckets are the latency buckets of every histogram.
var histogramBuckets = vegeta.Buckets{
	0, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	200 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
	5 * time.Second, 10 * time.Second,
}

// plotPoints bounds the points per series in the HTML time series.
const plotPoints = 4000

// recorder accounts every call of one scenario: vegeta Metrics (t-digest
// percentiles, bucketed histogram) per call kind, outcome counts, a per-second
// timeline and the vegeta time-series plot. Safe for concurrent use.
type recorder struct {
	scenario string
	start    time.Time

	mu       sync.Mutex
	seq      uint64
	first    time.Time // the first call's start
	last     time.Time // the last answer
	kinds    map[string]*kindStats
	timeline []Second
	plot     *plot.Plot
	plotErr  error

	requests, errors, inflight atomic.Int64
}

// kindStats is the accounting of one call kind.
type kindStats struct {
	all, ok  vegeta.Metrics
	outcomes map[string]int
	codes    map[string]int
}

// Second is one second of a scenario's timeline: the calls started in it and how
// many of them were not answered 2xx.
type Second struct {
	Requests int `json:"requests"`
	Errors   int `json:"errors"`
}

// call is one call in flight.
type call struct {
	seq uint64
	at  time.Time
}

func newRecorder(scenario string) *recorder {
	return &recorder{
		scenario: scenario,
		start:    time.Now(),
		kinds:    map[string]*kindStats{},
		plot: plot.New(plot.Title("warmpool loadtest: "+scenario), plot.Downsample(plotPoints),
			plot.Label(plotLabel)),
	}
}

// plotLabel names a call's series in the plot: its kind, and its outcome when it
// failed (vegeta colours labels containing "ERROR" as failures).
func plotLabel(r *vegeta.Result) string {
	if r.Code >= 200 && r.Code < 300 {
		return r.Method
	}
	if r.Code == 0 {
		return r.Method + " ERROR"
	}
	return fmt.Sprintf("%s ERROR %d", r.Method, r.Code)
}

// begin starts a call: its sequence number and start time are taken together, so
// sequence order is time order (the plot needs both).
func (r *recorder) begin() call {
	r.inflight.Add(1)
	r.mu.Lock()
	c := call{seq: r.seq, at: time.Now()}
	if r.seq == 0 {
		r.first = c.at
	}
	r.seq++
	r.mu.Unlock()
	return c
}

// end records a call begun with begin; every begun call must end.
func (r *recorder) end(c call, kind string, a answer) {
	now := time.Now()
	took := now.Sub(c.at)
	r.inflight.Add(-1)
	r.requests.Add(1)
	if !a.ok() {
		r.errors.Add(1)
	}
	res := vegeta.Result{
		Attack:    r.scenario,
		Seq:       c.seq,
		Code:      uint16(a.status),
		Timestamp: c.at,
		Latency:   took,
		BytesIn:   uint64(len(a.body)),
		Error:     a.errorText(),
		Method:    kind,
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.After(r.last) {
		r.last = now
	}
	ks := r.kinds[kind]
	if ks == nil {
		ks = &kindStats{outcomes: map[string]int{}, codes: map[string]int{}}
		ks.all.Histogram = &vegeta.Histogram{Buckets: histogramBuckets}
		r.kinds[kind] = ks
	}
	ks.all.Add(&res)
	if a.ok() {
		ks.ok.Add(&res)
	}
	ks.outcomes[a.outcome()]++
	if a.code != "" {
		ks.codes[a.code]++
	}
	sec := int(c.at.Sub(r.start) / time.Second)
	if sec >= 0 {
		for len(r.timeline) <= sec {
			r.timeline = append(r.timeline, Second{})
		}
		r.timeline[sec].Requests++
		if !a.ok() {
			r.timeline[sec].Errors++
		}
	}
	if err := r.plot.Add(&res); err != nil && r.plotErr == nil {
		r.plotErr = err
	}
}

// progress prints a progress line every interval until stop is closed.
func (r *recorder) progress(w io.Writer, every time.Duration, stop <-chan struct{}) {
	if w == nil || every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last int64
	lastAt := r.start
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			n := r.requests.Load()
			el := now.Sub(r.start)
			rps := float64(n-last) / now.Sub(lastAt).Seconds()
			// Progress for a terminal: the run does not depend on it.
			_, _ = fmt.Fprintf(w, "%-7s %6.1fs  requests %8d  rps %8.0f  errors %6d  in flight %4d\n",
				r.scenario, el.Seconds(), n, rps, r.errors.Load(), r.inflight.Load())
			last, lastAt = n, now
		}
	}
}

// CallStats is the accounting of one call kind in a scenario.
type CallStats struct {
	Kind string `json:"kind"`
	// Count is the number of calls; OK those answered 2xx.
	Count int `json:"count"`
	OK    int `json:"ok"`
	// RPS is calls per second over the scenario's measured time; OKRPS counts only
	// the 2xx ones.
	RPS   float64 `json:"rps"`
	OKRPS float64 `json:"ok_rps"`
	// Latency covers every call; OKLatency the 2xx ones.
	Latency   Latency `json:"latency"`
	OKLatency Latency `json:"ok_latency"`
	// Outcomes counts calls by HTTP status and error code ("200", "503 QUEUE_FULL",
	// "error" for no answer).
	Outcomes map[string]int `json:"outcomes"`
	// Status counts calls by HTTP status code ("0" = no answer); Codes counts the
	// error envelope's codes of non-2xx answers.
	Status map[string]int `json:"status"`
	Codes  map[string]int `json:"codes"`
	// Errors lists distinct failure texts (at most 20).
	Errors    []string `json:"errors,omitempty"`
	Histogram []Bucket `json:"histogram"`
}

// Latency is a latency summary in milliseconds (t-digest quantiles).
type Latency struct {
	Min  float64 `json:"min_ms"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

// Bucket is one latency histogram bucket [From, To) in milliseconds; To is +Inf
// (encoded as 0) for the last one.
type Bucket struct {
	FromMs float64 `json:"from_ms"`
	ToMs   float64 `json:"to_ms,omitempty"`
	Count  uint64  `json:"count"`
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func latencyOf(m *vegeta.Metrics) Latency {
	if m.Requests == 0 {
		return Latency{}
	}
	l := m.Latencies
	return Latency{Min: ms(l.Min), Mean: ms(l.Mean), P50: ms(l.P50), P90: ms(l.P90), P99: ms(l.P99), Max: ms(l.Max)}
}

// stats closes the accounting over the measured time span and returns it per kind.
func (r *recorder) stats(span time.Duration) []CallStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	kinds := make([]string, 0, len(r.kinds))
	for k := range r.kinds {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		a, b := slices.Index(kindOrder, kinds[i]), slices.Index(kindOrder, kinds[j])
		if a != b {
			return uint(a) < uint(b) // unknown kinds (-1) last
		}
		return kinds[i] < kinds[j]
	})
	var out []CallStats
	for _, k := range kinds {
		ks := r.kinds[k]
		ks.all.Close()
		ks.ok.Close()
		cs := CallStats{
			Kind: k, Count: int(ks.all.Requests), OK: int(ks.ok.Requests),
			Latency: latencyOf(&ks.all), OKLatency: latencyOf(&ks.ok),
			Outcomes: ks.outcomes, Status: ks.all.StatusCodes, Codes: ks.codes,
		}
		if span > 0 {
			cs.RPS = float64(cs.Count) / span.Seconds()
			cs.OKRPS = float64(cs.OK) / span.Seconds()
		}
		if len(ks.all.Errors) > 20 {
			cs.Errors = ks.all.Errors[:20]
		} else {
			cs.Errors = ks.all.Errors
		}
		h := ks.all.Histogram
		for i, from := range h.Buckets {
			b := Bucket{FromMs: ms(from)}
			if i+1 < len(h.Buckets) {
				b.ToMs = ms(h.Buckets[i+1])
			}
			if i < len(h.Counts) {
				b.Count = h.Counts[i]
			}
			cs.Histogram = append(cs.Histogram, b)
		}
		out = append(out, cs)
	}
	return out
}

// span is the measured time: from the first call's start to the last answer.
func (r *recorder) span() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seq == 0 {
		return 0
	}
	return r.last.Sub(r.first)
}

// timelineCopy returns the per-second timeline.
func (r *recorder) timelineCopy() []Second {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.timeline)
}

// plotHTML renders the vegeta time-series plot (a self-contained HTML page).
func (r *recorder) plotHTML(w io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.plotErr != nil {
		return r.plotErr
	}
	r.plot.Close()
	_, err := r.plot.WriteTo(w)
	return err
}

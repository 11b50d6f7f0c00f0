// Package loadtest is warmpool's load tester (`warmpool loadtest`, SPEC §9): it drives
// one replica through its HTTP API with three scenarios and reports what it measured.
//
//   - warm: session slots loop route → touch → end on a scope whose pods were
//     made warm first (min_idle_pods), flat out or at a target rate; also "route"
//     (routes only) and "hold" (sessions held and touched) modes.
//   - cold: bursts of N concurrent routes, each on a fresh scope: wall time, how many
//     were served and how many pods were deployed (want ceil(N / pod_concurrency)).
//   - queued: a scope held at capacity while more clients route, wait in the queue and
//     are served as others end: the queue wait and the outcomes.
//
// Latencies are accounted with vegeta's Metrics (t-digest quantiles and a bucketed
// histogram) per call kind; the time series is vegeta's HTML plot. A run writes
// results.json and report.html. Every scenario creates its own scopes
// (prefix + scenario + random suffix) and only ever talks to loopback addresses;
// every loop is bounded in count and time.
package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/warmpool/warmpool"
)

// Results is everything one run measured.
type Results struct {
	Server   string    `json:"server"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Options  Options   `json:"options"`
	// Client describes the machine the load tester ran on.
	Client    Machine           `json:"client"`
	Scenarios []*ScenarioResult `json:"scenarios"`
}

// Options echoes the run's configuration.
type Options struct {
	Scenarios      []string `json:"scenarios"`
	DurationS      float64  `json:"duration_s"`
	Rate           float64  `json:"rate"`
	Sessions       int      `json:"sessions"`
	Workers        int      `json:"workers"`
	WarmMode       string   `json:"warm_mode"`
	Touches        int      `json:"touches"`
	PodConcurrency int      `json:"pod_concurrency"`
	MaxConcurrency int      `json:"max_concurrency"`
	Burst          int      `json:"burst"`
	Bursts         int      `json:"bursts"`
	DeployDelayMs  float64  `json:"deploy_delay_ms,omitempty"`
	QueueSize      int      `json:"queue_size"`
	WaitTimeoutS   int      `json:"wait_timeout_s"`
	QueuedClients  int      `json:"queued_clients"`
	HoldMs         float64  `json:"hold_ms"`
	TimeoutS       float64  `json:"timeout_s"`
	ScopePrefix    string   `json:"scope_prefix"`
}

// Machine names the machine the load tester ran on.
type Machine struct {
	NumCPU    int    `json:"nproc"`
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
}

// ScenarioResult is what one scenario measured.
type ScenarioResult struct {
	Name string `json:"name"`
	// Scopes are the scopes the scenario created.
	Scopes []string `json:"scopes"`
	// Pool is the pool config of its scope(s).
	Pool    warmpool.PoolConfig `json:"pool"`
	Started time.Time           `json:"started"`
	// Seconds is the measured time: from the first call to the last answer.
	Seconds  float64 `json:"seconds"`
	Requests int     `json:"requests"`
	// Errors counts calls not answered 2xx (expected ones included, such as a
	// queued route's WAIT_TIMEOUT).
	Errors int `json:"errors"`
	// RPS is calls per second over Seconds.
	RPS      float64     `json:"rps"`
	Calls    []CallStats `json:"calls"`
	Timeline []Second    `json:"timeline"`

	Warm   *WarmResult   `json:"warm,omitempty"`
	Cold   *ColdResult   `json:"cold,omitempty"`
	Queued *QueuedResult `json:"queued,omitempty"`
	// Notes are findings worth a look (a target rate not reached, unexpected deploys,
	// 5xx answers, …).
	Notes []string `json:"notes,omitempty"`

	plotHTML []byte
}

// Call returns the stats of one call kind, or nil.
func (s *ScenarioResult) Call(kind string) *CallStats {
	for i := range s.Calls {
		if s.Calls[i].Kind == kind {
			return &s.Calls[i]
		}
	}
	return nil
}

// Scenario returns the result of one scenario, or nil.
func (r *Results) Scenario(name string) *ScenarioResult {
	for _, s := range r.Scenarios {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Run validates cfg and runs its scenarios in order against cfg.Server. Progress
// lines go to progress (nil = none). A scenario that cannot start (the server
// refuses a config, warm pods never come) ends the run with an error; the results of
// the scenarios that ran are returned with it.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Results, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, bound(cfg))
	defer cancel()
	conns := cfg.Workers
	if slices.Contains(cfg.Scenarios, ScenarioCold) {
		conns = max(conns, cfg.Burst)
	}
	if slices.Contains(cfg.Scenarios, ScenarioQueued) {
		conns = max(conns, cfg.QueuedClients)
	}
	conns += 8
	e := &engine{cfg: cfg, progress: progress, cl: newClient(cfg.Server, cfg.Token, conns, cfg.Timeout)}
	defer e.cl.close()
	res := &Results{Server: cfg.Server, Started: time.Now().UTC(), Options: options(cfg), Client: machine()}
	if err := e.ping(ctx); err != nil {
		return nil, err
	}
	var err error
	for _, name := range cfg.Scenarios {
		var sr *ScenarioResult
		switch name {
		case ScenarioWarm:
			sr, err = e.warm(ctx)
		case ScenarioCold:
			sr, err = e.cold(ctx)
		case ScenarioQueued:
			sr, err = e.queued(ctx)
		}
		if sr != nil {
			res.Scenarios = append(res.Scenarios, sr)
			if progress != nil {
				_, _ = fmt.Fprint(progress, sr.oneLine()) // progress for a terminal
			}
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", name, err)
			break
		}
	}
	res.Finished = time.Now().UTC()
	return res, err
}

// bound is the longest a run with cfg may take: every phase's own bound, added up.
func bound(c Config) time.Duration {
	var d time.Duration
	for _, s := range c.Scenarios {
		switch s {
		case ScenarioWarm, ScenarioQueued:
			d += c.WarmupTimeout + c.Duration + 2*c.Timeout + cleanupTimeout
		case ScenarioCold:
			d += time.Duration(c.Bursts) * (2*c.Timeout + cleanupTimeout)
		}
	}
	return d + time.Minute
}

func options(c Config) Options {
	return Options{
		Scenarios: c.Scenarios, DurationS: c.Duration.Seconds(), Rate: c.Rate, Sessions: c.Sessions,
		Workers: c.Workers, WarmMode: c.WarmMode, Touches: c.Touches,
		PodConcurrency: c.PodConcurrency, MaxConcurrency: c.MaxConcurrency, Burst: c.Burst,
		Bursts: c.Bursts, DeployDelayMs: ms(c.DeployDelay), QueueSize: c.QueueSize,
		WaitTimeoutS: waitTimeoutS(c.WaitTimeout), QueuedClients: c.QueuedClients,
		HoldMs: ms(c.Hold), TimeoutS: c.Timeout.Seconds(), ScopePrefix: c.ScopePrefix,
	}
}

func machine() Machine {
	m := Machine{NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// waitTimeoutS is wait_timeout_s for a wait timeout (whole seconds, rounded up).
func waitTimeoutS(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// oneLine is a scenario's summary line for the progress stream.
func (s *ScenarioResult) oneLine() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%-7s done: %d requests in %.1fs (%.0f/s), %d not 2xx", s.Name, s.Requests, s.Seconds, s.RPS, s.Errors)
	if r := s.Call(KindRoute); r != nil {
		fmt.Fprintf(&b, "; route p50 %.2fms p99 %.2fms", r.Latency.P50, r.Latency.P99)
	}
	b.WriteString("\n")
	return b.String()
}

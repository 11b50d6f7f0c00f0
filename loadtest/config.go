package loadtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/warmpool/warmpool"
)

// The scenarios, in the order "all" runs them.
const (
	ScenarioWarm   = "warm"
	ScenarioCold   = "cold"
	ScenarioQueued = "queued"
)

// AllScenarios lists every scenario in the order "all" runs them.
var AllScenarios = []string{ScenarioWarm, ScenarioCold, ScenarioQueued}

// The modes of the warm scenario.
const (
	// WarmCycle: each session slot loops route → touch × Touches → end, with a new
	// session id every cycle.
	WarmCycle = "cycle"
	// WarmRoute: every call routes a new session that is never ended (the route path
	// alone); the scope needs capacity for every route of the run.
	WarmRoute = "route"
	// WarmHold: Sessions sessions are routed once and then touched round-robin until
	// the end (a replica holding that many sessions); they are ended at cleanup.
	WarmHold = "hold"
)

// Defaults of Config.
const (
	DefaultServer        = "http://127.0.0.1:8080"
	DefaultDuration      = 10 * time.Second
	DefaultSessions      = 64
	DefaultWorkers       = 16
	DefaultPodConc       = 2
	DefaultMaxConc       = 8
	DefaultBursts        = 3
	DefaultQueueSize     = 64
	DefaultWaitTimeout   = 5 * time.Second
	DefaultHold          = 20 * time.Millisecond
	DefaultTouches       = 1
	DefaultTimeout       = 30 * time.Second
	DefaultWarmupTimeout = 60 * time.Second
	DefaultScopePrefix   = "lt-"
	DefaultProgress      = time.Second
)

// Bounds: every run is bounded in count and time.
const (
	MaxDuration      = 10 * time.Minute
	MaxRate          = 1_000_000
	MaxSessions      = 100_000
	MaxWorkers       = 4096
	MaxBurst         = 10_000
	MaxBursts        = 100
	MaxQueuedClients = 10_000
	MaxTouches       = 100
	MaxTimeout       = 5 * time.Minute
	MaxWarmupTimeout = 10 * time.Minute
	MaxHold          = time.Minute
)

// Config is one load-test run. Zero fields take the defaults above (Rate 0 means flat
// out; Burst and QueuedClients 0 derive from MaxConcurrency).
type Config struct {
	// Server is the base URL of the replica under test; only loopback hosts are
	// accepted (see CheckLoopback).
	Server string
	// Token is the bearer token, when the server has auth on.
	Token string
	// Scenarios to run, in order; empty = all.
	Scenarios []string
	// ScopePrefix starts the name of every scope the run creates
	// (prefix + scenario + "-" + random suffix).
	ScopePrefix string

	// Duration is the measured time of the warm and the queued scenario (each).
	Duration time.Duration
	// Rate is the warm scenario's target rate in calls per second; 0 = flat out.
	Rate float64
	// Sessions is the number of concurrent session slots of the warm scenario.
	Sessions int
	// Workers is the number of concurrent requests of the warm scenario.
	Workers int
	// WarmMode is WarmCycle, WarmRoute or WarmHold.
	WarmMode string
	// Touches is the number of touches per cycle (WarmCycle); 0 takes DefaultTouches,
	// a negative value means none (route → end).
	Touches int

	// PodConcurrency is pod_concurrency of every scope the run creates.
	PodConcurrency int
	// MaxConcurrency is max_concurrency of the cold and queued scopes; the warm scope
	// takes max(MaxConcurrency, Sessions).
	MaxConcurrency int

	// Burst is the number of concurrent cold routes of one burst (default
	// MaxConcurrency); Bursts is how many bursts, each on a fresh scope.
	Burst, Bursts int
	// DeployDelay is the server's deploy delay, when known (a fake driver's); it only
	// adds the wall/delay ratio to the cold burst report.
	DeployDelay time.Duration

	// QueueSize and WaitTimeout are queue_size and wait_timeout_s of the queued scope.
	QueueSize   int
	WaitTimeout time.Duration
	// QueuedClients is the number of session loops of the queued scenario (default
	// 3 × MaxConcurrency); Hold is how long each holds its session before ending it.
	QueuedClients int
	Hold          time.Duration

	// Timeout bounds every request; WarmupTimeout bounds waiting for warm pods.
	Timeout       time.Duration
	WarmupTimeout time.Duration
	// ProgressEvery is the interval of the progress line (negative = none).
	ProgressEvery time.Duration
}

// withDefaults returns c with zero fields filled.
func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Server == "" {
		c.Server = DefaultServer
	}
	if c.ScopePrefix == "" {
		c.ScopePrefix = DefaultScopePrefix
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = AllScenarios
	}
	if c.WarmMode == "" {
		c.WarmMode = WarmCycle
	}
	defD(&c.Duration, DefaultDuration)
	def(&c.Sessions, DefaultSessions)
	def(&c.Workers, DefaultWorkers)
	def(&c.Touches, DefaultTouches)
	c.Touches = max(c.Touches, 0)
	def(&c.PodConcurrency, DefaultPodConc)
	def(&c.MaxConcurrency, DefaultMaxConc)
	def(&c.Burst, c.MaxConcurrency)
	def(&c.Bursts, DefaultBursts)
	def(&c.QueueSize, DefaultQueueSize)
	defD(&c.WaitTimeout, DefaultWaitTimeout)
	def(&c.QueuedClients, 3*c.MaxConcurrency)
	defD(&c.Hold, DefaultHold)
	defD(&c.Timeout, DefaultTimeout)
	defD(&c.WarmupTimeout, DefaultWarmupTimeout)
	defD(&c.ProgressEvery, DefaultProgress)
	return c
}

var prefixRe = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,31}$`)

// validate checks a Config whose defaults are filled.
func (c Config) validate() error {
	if err := CheckLoopback(c.Server); err != nil {
		return err
	}
	for _, s := range c.Scenarios {
		if !slices.Contains(AllScenarios, s) {
			return fmt.Errorf("scenario %q: want warm, cold, queued or all", s)
		}
	}
	between := func(name string, v, lo, hi int) error {
		if v < lo || v > hi {
			return fmt.Errorf("%s: must be between %d and %d, got %d", name, lo, hi, v)
		}
		return nil
	}
	betweenD := func(name string, v, lo, hi time.Duration) error {
		if v < lo || v > hi {
			return fmt.Errorf("%s: must be between %v and %v, got %v", name, lo, hi, v)
		}
		return nil
	}
	return errors.Join(
		func() error {
			if !prefixRe.MatchString(c.ScopePrefix) {
				return fmt.Errorf("scope-prefix %q: lowercase letters, digits, '.' and '-', at most 32 chars, starting with a letter or digit", c.ScopePrefix)
			}
			return nil
		}(),
		func() error {
			if c.WarmMode != WarmCycle && c.WarmMode != WarmRoute && c.WarmMode != WarmHold {
				return fmt.Errorf("warm-mode %q: want cycle, route or hold", c.WarmMode)
			}
			return nil
		}(),
		func() error {
			if c.Rate < 0 || c.Rate > MaxRate {
				return fmt.Errorf("rate: must be between 0 (flat out) and %d, got %v", MaxRate, c.Rate)
			}
			return nil
		}(),
		betweenD("duration", c.Duration, time.Millisecond, MaxDuration),
		between("sessions", c.Sessions, 1, MaxSessions),
		between("workers", c.Workers, 1, MaxWorkers),
		between("touches", c.Touches, 0, MaxTouches),
		between("pod-concurrency", c.PodConcurrency, 1, warmpool.MaxPodConcurrency),
		func() error {
			mc := c.MaxConcurrency
			if !slices.Contains(c.Scenarios, ScenarioCold) && !slices.Contains(c.Scenarios, ScenarioQueued) {
				mc = max(mc, c.Sessions) // the warm scope's max_concurrency
			}
			return between("max-concurrency", mc, c.PodConcurrency, warmpool.MaxConcurrencyCap)
		}(),
		between("bursts", c.Bursts, 1, MaxBursts),
		between("queue-size", c.QueueSize, 0, warmpool.MaxQueueSize),
		betweenD("wait-timeout", c.WaitTimeout, 0, time.Duration(warmpool.MaxWaitTimeoutS)*time.Second),
		betweenD("hold", c.Hold, 0, MaxHold),
		betweenD("timeout", c.Timeout, 10*time.Millisecond, MaxTimeout),
		betweenD("warmup-timeout", c.WarmupTimeout, 10*time.Millisecond, MaxWarmupTimeout),
		// Burst and QueuedClients derive from MaxConcurrency: checked only when used.
		func() error {
			if slices.Contains(c.Scenarios, ScenarioCold) {
				return between("burst", c.Burst, 1, MaxBurst)
			}
			return nil
		}(),
		func() error {
			if slices.Contains(c.Scenarios, ScenarioQueued) {
				return between("queued-clients", c.QueuedClients, 1, MaxQueuedClients)
			}
			return nil
		}(),
		func() error {
			if slices.Contains(c.Scenarios, ScenarioQueued) && c.Timeout <= c.WaitTimeout {
				return fmt.Errorf("timeout (%v) must exceed wait-timeout (%v): a queued route waits that long", c.Timeout, c.WaitTimeout)
			}
			return nil
		}(),
	)
}

// CheckLoopback accepts only http(s) URLs whose host is a loopback address
// (127.0.0.0/8, ::1) or "localhost": the load tester never sends traffic off this
// machine. The dialer checks the resolved address again on every connection.
func CheckLoopback(server string) error {
	u, err := url.Parse(server)
	if err != nil {
		return fmt.Errorf("--server %q: %w", server, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("--server %q: want an http:// or https:// URL", server)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("--server %q: no host", server)
	}
	if !loopbackHost(host) {
		return fmt.Errorf("--server %q: refused: host %q is not a loopback address (127.0.0.0/8, localhost or ::1); the load tester only targets this machine", server, host)
	}
	return nil
}

func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

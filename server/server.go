// Package server assembles one warmpool replica: Redis, the config store, a pod
// driver, the resource and session managers, the config service and the HTTP API.
// cmd/warmpool builds it from flags; tests build several on one Redis.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/internal/metrics"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/reports"
	"github.com/warmpool/warmpool/rm"
	"github.com/warmpool/warmpool/scopes"
	"github.com/warmpool/warmpool/sessionconfig"
	"github.com/warmpool/warmpool/sm"
	"github.com/warmpool/warmpool/sweeper"
	"github.com/warmpool/warmpool/tenants"
	"github.com/warmpool/warmpool/ui"
)

// Defaults of Config.
const (
	// DefaultListen is the HTTP address `warmpool serve` listens on.
	DefaultListen = "127.0.0.1:8080"
	DefaultStore  = "warmpool.db"
	DemoScope     = "demo"
	// DefaultDrainDelay is how long `warmpool serve` keeps serving after SIGTERM with
	// /readyz answering 503, so that load balancers take the replica out first.
	DefaultDrainDelay = 5 * time.Second
	// DefaultShutdownGrace bounds how long calls in flight may finish once the
	// listener is closed.
	DefaultShutdownGrace = 30 * time.Second

	// DefaultReadHeaderTimeout bounds the request line and headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds headers and body: a body of up to 1 MiB has had
	// time to arrive; a client trickling it is cut off with 400.
	DefaultReadTimeout = 30 * time.Second
	// DefaultCallTimeout bounds a call that does not wait (everything but a session
	// route and an acquire): its work is cut then and it answers STORE_UNAVAILABLE,
	// and its answer must be written within httpx.WriteMargin after.
	DefaultCallTimeout = 30 * time.Second
	// DefaultWaitTimeout fits the longest legitimate call, a route or an acquire
	// that waits in the queue for the longest wait_timeout_s, then for a deploy of the
	// longest ready_timeout_s, plus a margin to write the answer. No other call may
	// hold its connection that long.
	DefaultWaitTimeout = (warmpool.MaxWaitTimeoutS+warmpool.MaxReadyTimeoutS)*time.Second + 30*time.Second
	// DefaultIdleTimeout is how long a kept-alive connection waits for its next
	// request; longer than the usual load balancer idle timeout (60 s), so that the
	// balancer, not the replica, closes idle connections.
	DefaultIdleTimeout = 120 * time.Second
)

// HTTPTimeouts bound each connection and call of the HTTP server; fields not above
// zero take the defaults. ReadHeader, Read and Idle are net/http's timeouts of the
// same names; Call bounds a call that does not wait and Wait the answer of one that
// does (httpx.Bounds), in place of one write timeout for all.
type HTTPTimeouts struct {
	ReadHeader time.Duration
	Read       time.Duration
	Call       time.Duration
	Wait       time.Duration
	Idle       time.Duration
}

// Config is everything a replica is built from; zero fields take defaults (fill).
type Config struct {
	RedisURL  string // see RedisHelp; "" = an embedded in-process Redis (dev)
	StorePath string // config store: FILE or sqlite://FILE, or a postgres:// URL
	// NewDriver builds the pod driver, with the replica's logger and clock; a driver
	// it returns that is an io.Closer is closed with the replica. cmd/warmpool takes
	// it from the driver registry (driver.Set.Pick), so that the server links no
	// driver: client-go is linked into the binary, not into every test that builds a
	// replica.
	NewDriver func(driver.Env) (warmpool.PodDriver, error)
	// DriverName names the pod driver (the --driver name) in the driver label of the
	// deploy metrics; default "other".
	DriverName string
	// DeployPolicy, when set, holds every config PUT to the operator's rules (SPEC
	// §11.1); cmd/warmpool builds it from the serve flags (podpolicy.Policy).
	DeployPolicy warmpool.DeployPolicy
	InstanceID   string
	// MaxPodsTotal caps every pod of the deployment together (`--max-pods-total`,
	// SPEC §12.1; 0: no cap), shared between tenants by weight while it binds. Every
	// replica must be given the same.
	MaxPodsTotal int
	// RedisCA is a PEM file of the authorities that sign the Redis server's TLS
	// certificate; empty = the system's roots.
	RedisCA string

	// AuthToken is the gateway token every /v1 call needs (empty = no auth);
	// AuthTokenFile reads it from a file, re-read when it changes. AdminToken (or
	// AdminTokenFile) is the token of the admin calls (config writes, sync); it is
	// accepted on every call. See SPEC §10, "Two tokens".
	AuthToken, AuthTokenFile   string
	AdminToken, AdminTokenFile string
	// ReportURL is where pods report (`--report-url`, e.g. the Service's address;
	// empty: reports are off), and ReportSecret (or ReportSecretFile, re-read when it
	// changes) the secret every replica shares, under which each pod's report token
	// is made (SPEC §11.2). A secret without a URL still takes reports.
	ReportURL, ReportSecret, ReportSecretFile string

	// DrainDelay is how long Run keeps serving after its context ends, with /readyz
	// answering 503 (zero: no delay; `warmpool serve` defaults to DefaultDrainDelay).
	DrainDelay time.Duration
	// ShutdownGrace bounds how long calls in flight may finish after the drain
	// (DefaultShutdownGrace unless above zero).
	ShutdownGrace time.Duration
	// HTTP bounds the connections of Run's HTTP server.
	HTTP HTTPTimeouts
	// MetricsListen is the address /metrics is served on alone, by a listener and an
	// HTTP server of its own (`--metrics-listen`); empty: /metrics is a route of the
	// main listener.
	MetricsListen string
	// E2BListen is the address of the E2B-compatible front door (`--e2b-listen`, SPEC
	// §12.3), served by a listener and an HTTP server of its own; empty: off.
	E2BListen string
	// Metrics tunes the metrics: the scopes whose histograms carry their scope
	// (`--metrics-scope-detail`), the bound on scrapes served at once and their
	// timeout; zero fields take the metrics package's defaults.
	Metrics metrics.Config
	// Prefix of every Redis key; the keyspace fills its default (redisstore.DefaultPrefix).
	Prefix string
	Dev    bool

	// Sweep tunes the background jobs; Sweep.Interval is their common interval
	// (sweeper.DefaultInterval when zero).
	Sweep sweeper.Config
	// LockLease is the lease of the jobs' locks (sweeper.DefaultLockLease when zero).
	LockLease time.Duration

	Logger *slog.Logger

	// Tests inject these instead of having them built (Driver instead of NewDriver;
	// an injected driver is not closed with the replica).
	Redis  redis.UniversalClient
	Driver warmpool.PodDriver
	Store  warmpool.ConfigStore
	Clock  warmpool.Clock
	RM     rm.Config
	SM     sm.Config
}

// Server is one replica.
type Server struct {
	cfg     Config
	log     *slog.Logger
	rdb     redis.UniversalClient
	mini    *miniredis.Miniredis
	store   *redisstore.Store
	configs warmpool.ConfigStore
	driver  warmpool.PodDriver
	RM      *rm.Manager
	SM      *sm.Manager
	Scopes  *scopes.Service
	Tenants *tenants.Service
	Sweeper *sweeper.Sweeper
	Runner  *sweeper.Runner
	Reports *reports.Manager
	// reportKey checks the pods' report tokens (nil: reports are off).
	reportKey *httpx.ReportKey
	// sessionConfigs seals the routes' session configs and opens them for the agents.
	sessionConfigs *sessionconfig.Service
	metrics        *metrics.Metrics
	ui             *ui.UI
	auth           func(http.Handler) http.Handler
	handler        http.Handler
	// metricsLn serves /metrics alone when Config.MetricsListen is set.
	metricsLn net.Listener
	// e2bLn and e2b serve the E2B front door when Config.E2BListen is set.
	e2bLn net.Listener
	e2b   http.Handler
	// draining is set when Run's context ends: /readyz answers 503 from then on.
	draining atomic.Bool

	closers []func() error
	once    sync.Once
}

// fill gives every zero field its default: the one place a replica's defaults are
// decided. Parts with defaults of their own (the sweeper, the managers, the keyspace,
// the drivers) get zero fields passed through and fill them themselves.
func (c *Config) fill() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.StorePath == "" {
		c.StorePath = DefaultStore
	}
	if c.DriverName == "" {
		c.DriverName = "other"
	}
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		c.InstanceID = host + "-" + warmpool.NewID()[:6]
	}
	if c.Clock == nil {
		c.Clock = warmpool.SystemClock{}
	}
	defaults.Positive(&c.ShutdownGrace, DefaultShutdownGrace)
	defaults.Positive(&c.HTTP.ReadHeader, DefaultReadHeaderTimeout)
	defaults.Positive(&c.HTTP.Read, DefaultReadTimeout)
	defaults.Positive(&c.HTTP.Call, DefaultCallTimeout)
	defaults.Positive(&c.HTTP.Wait, DefaultWaitTimeout)
	defaults.Positive(&c.HTTP.Idle, DefaultIdleTimeout)
}

// check reports a combination of fields that cannot work.
func (c *Config) check() error {
	if c.Driver == nil && c.NewDriver == nil {
		return errors.New("no pod driver: set Config.NewDriver (or Config.Driver)")
	}
	if c.AuthToken != "" && c.AuthTokenFile != "" {
		return errors.New("give the gateway token once: --auth-token or --auth-token-file")
	}
	if c.AdminToken != "" && c.AdminTokenFile != "" {
		return errors.New("give the admin token once: --admin-token or --admin-token-file")
	}
	if err := c.checkReports(); err != nil {
		return err
	}
	if c.DrainDelay < 0 {
		return fmt.Errorf("drain delay %v: must not be negative", c.DrainDelay)
	}
	if c.MaxPodsTotal < 0 {
		return fmt.Errorf("--max-pods-total %d: must not be negative (0: no cap)", c.MaxPodsTotal)
	}
	return nil
}

// New builds a replica and bootstraps Redis from the config store when it is empty.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg.fill()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	// Every line logged for a request, by any part, carries its request id.
	s := &Server{cfg: cfg, log: slog.New(httpx.LogHandler(cfg.Logger.Handler())).With("instance", cfg.InstanceID)}
	if err := s.build(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) build(ctx context.Context) error {
	cfg := s.cfg
	gateway, err := s.token(cfg.AuthToken, cfg.AuthTokenFile)
	if err != nil {
		return fmt.Errorf("gateway token: %w", err)
	}
	admin, err := s.token(cfg.AdminToken, cfg.AdminTokenFile)
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	s.auth = httpx.Auth(gateway, admin, s.log)
	// Redis.
	switch {
	case cfg.Redis != nil:
		s.rdb = cfg.Redis
	case cfg.RedisURL == "":
		mini, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("embedded redis: %w", err)
		}
		s.mini = mini
		s.closers = append(s.closers, func() error { mini.Close(); return nil })
		s.rdb = redis.NewClient(&redis.Options{Addr: mini.Addr()})
		s.log.Warn("embedded in-process Redis: for development only, state is lost on exit")
	default:
		rdb, err := NewRedis(cfg.RedisURL, cfg.RedisCA)
		if err != nil {
			return err
		}
		if c, ok := rdb.(*redis.Client); ok {
			// Before the first connection: each one checks that Redis still serves
			// the history the pool was built on (no failover lost its writes).
			c.Options().OnConnect = redisstore.FailoverCheck(cfg.Prefix, s.log)
		}
		s.rdb = rdb
		if err := refusedByRedis(ctx, rdb); err != nil {
			_ = rdb.Close()
			return err
		}
	}
	if cfg.Redis == nil {
		s.closers = append(s.closers, s.rdb.Close)
	}
	s.store = redisstore.NewStore(s.rdb, cfg.Prefix)
	s.store.SweepPeriod(cfg.Sweep.Interval)
	s.store.MaxPodsTotal(int64(cfg.MaxPodsTotal))

	// Config store.
	if cfg.Store != nil {
		s.configs = cfg.Store
	} else {
		st, err := openConfigStore(ctx, cfg.StorePath)
		if err != nil {
			return err
		}
		s.configs = st
		s.closers = append(s.closers, st.Close)
	}

	mc := cfg.Metrics
	mc.Logger = s.log
	if s.metrics, err = metrics.New(s.store, mc); err != nil {
		return fmt.Errorf("--metrics-scope-detail: %w", err)
	}
	s.store.ObserveScripts(s.metrics.ObserveScript)
	s.store.ObserveDueIndexFailures(s.metrics.ObserveDueIndexFailure)

	// Pod driver.
	if cfg.Driver != nil {
		s.driver = cfg.Driver
	} else {
		d, err := cfg.NewDriver(driver.Env{Logger: s.log, Clock: cfg.Clock})
		if err != nil {
			return err
		}
		s.driver = d
		if c, ok := d.(io.Closer); ok {
			s.closers = append(s.closers, c.Close)
		}
	}

	// Managers and services.
	rmc := cfg.RM
	rmc.Clock, rmc.Logger, rmc.Observe = cfg.Clock, s.log, s.metrics.Observe
	if rmc.Report, err = s.buildReports(); err != nil {
		return err
	}
	rmc.OnDeploy = func(r rm.DeployReport) {
		s.metrics.ObserveDeploy(r.Scope, cfg.DriverName, r.Result, r.Took)
		for _, p := range r.Phases {
			s.metrics.ObservePhase(r.Scope, cfg.DriverName, p.Phase, p.Elapsed)
		}
	}
	s.RM = rm.New(s.store, s.driver, rmc)
	smc := cfg.SM
	smc.Clock, smc.Logger, smc.Observe, smc.ObserveRoute = cfg.Clock, s.log, s.metrics.Observe, s.metrics.ObserveRoute
	s.SM = sm.New(s.store, s.RM, smc)
	secrets, _ := s.driver.(warmpool.SecretReader)
	s.sessionConfigs = sessionconfig.New(s.reportKey, s.store, secrets, cfg.Clock)
	dry, _ := s.driver.(warmpool.DryRunner)
	s.Scopes = scopes.New(s.configs, s.store, s.RM, s.log, s.metrics.Observe).WithPolicy(cfg.DeployPolicy, dry)
	s.buildTenants()
	swc := cfg.Sweep
	swc.Clock, swc.Logger, swc.Observe, swc.OnFix = cfg.Clock, s.log, s.metrics.Observe, s.metrics.ObserveFix
	swc.Tenants = s.Tenants
	s.Sweeper = sweeper.New(s.store, s.RM, s.SM, s.driver, s.configs, swc)
	s.Runner = sweeper.NewRunner(s.store, s.Sweeper.Jobs(), cfg.LockLease, s.log)
	s.Runner.OnRun = s.metrics.ObserveJob
	s.ui = ui.New(s.store, s.Tenants, cfg.InstanceID, cfg.Clock, s.log)
	s.handler = s.routes()
	if s.metricsLn, err = s.listen("--metrics-listen", cfg.MetricsListen); err != nil {
		return err
	}
	if s.e2bLn, err = s.listen("--e2b-listen", cfg.E2BListen); err != nil {
		return err
	}
	if s.e2bLn != nil {
		s.e2b = s.e2bRoutes(gateway, admin)
	}

	if err := s.bootstrap(ctx); err != nil {
		return err
	}
	if cfg.Dev {
		if err := s.ensureDemoScope(ctx); err != nil {
			return err
		}
	}
	return nil
}

// listen opens the listener of a server of its own on addr (nil when addr is empty),
// closed with the replica unless Run's shutdown closed it already.
func (s *Server) listen(flag, addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	s.closers = append(s.closers, func() error {
		if err := ln.Close(); !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	})
	return ln, nil
}

// token is the token given by value or by file, or nil for none.
func (s *Server) token(value, file string) (*httpx.Token, error) {
	if file != "" {
		return httpx.FileToken(file, s.log)
	}
	return httpx.FixedToken(value), nil
}

// Metrics gathers the replica's metrics, as /metrics serves them.
func (s *Server) Metrics() prometheus.Gatherer { return s.metrics }

// InstanceID names the replica.
func (s *Server) InstanceID() string { return s.cfg.InstanceID }

// Store is the replica's Redis store.
func (s *Server) Store() *redisstore.Store { return s.store }

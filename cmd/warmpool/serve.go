package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path"
	"strings"
	"time"

	"github.com/warmpool/warmpool/driver"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/rm"
	"github.com/warmpool/warmpool/server"
	"github.com/warmpool/warmpool/sweeper"
)

// serveOptions are the serve flags that are not fields of server.Config.
type serveOptions struct {
	listen    string
	logLevel  string
	logFormat string
	driver    string
	// drivers are the registered drivers (drivers.go), their flags declared.
	drivers driver.Set
	policy  *policyOptions
}

// devDriver is the driver of --dev when --driver names none (SPEC §9: "--dev =
// embedded Redis + local driver"), one of those drivers.go imports.
const devDriver = "local"

// serveFlags declares the serve flags, writing into cfg and o, the flags of every
// registered driver among them. Every flag also reads its environment variable
// (applyEnv), which the usage line names.
func serveFlags(cfg *server.Config, o *serveOptions, getenv func(string) string) *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&o.listen, "listen", server.DefaultListen, "HTTP listen address")
	fs.StringVar(&cfg.RedisURL, "redis", "", "Redis (required unless --dev): "+server.RedisHelp)
	fs.StringVar(&cfg.RedisCA, "redis-ca", "", "PEM file of the CAs that sign the Redis TLS certificate (default: the system's roots)")
	fs.StringVar(&cfg.StorePath, "store", server.DefaultStore, "config store: FILE or sqlite://FILE (SQLite), or postgres://user:pass@host:port/db?sslmode=… (PostgreSQL, shared by replicas)")
	fs.StringVar(&o.driver, "driver", "", "pod driver: "+driver.List()+"; required, except with --dev, which runs "+devDriver+" without it")
	o.drivers = driver.AddFlags(fs, getenv)
	o.policy = policyFlags(fs)
	fs.StringVar(&cfg.InstanceID, "instance-id", "", "replica name (default hostname + random suffix)")
	fs.StringVar(&cfg.AuthToken, "auth-token", "", "gateway bearer token, required on every /v1 call (empty = no auth)")
	fs.StringVar(&cfg.AuthTokenFile, "auth-token-file", "", "file holding the gateway token, re-read when it changes (instead of --auth-token)")
	fs.StringVar(&cfg.AdminToken, "admin-token", "", "admin bearer token: config writes and sync need it; accepted on every call (empty = the gateway token does everything)")
	fs.StringVar(&cfg.AdminTokenFile, "admin-token-file", "", "file holding the admin token, re-read when it changes (instead of --admin-token)")
	fs.StringVar(&cfg.ReportURL, "report-url", "", "address the pods' agents report to (e.g. the Service's), given them as WARMPOOL_REPORT_URL (empty = reports off)")
	fs.StringVar(&cfg.ReportSecret, "report-secret", "", "secret every replica shares, under which each pod gets its own report token")
	fs.StringVar(&cfg.ReportSecretFile, "report-secret-file", "", "file holding the report secret, re-read when it changes (instead of --report-secret)")
	fs.StringVar(&cfg.Prefix, "prefix", redisstore.DefaultPrefix, "Redis key prefix")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "", "address that serves /metrics, and only it, on a listener of its own (empty: /metrics on --listen)")
	fs.StringVar(&cfg.E2BListen, "e2b-listen", "", "address of the E2B-compatible front door, the E2B SDK's E2B_API_URL (docs/e2b.md; empty: off)")
	fs.StringVar(&cfg.Metrics.ScopeDetail, "metrics-scope-detail", "", "glob (path.Match) of the scopes whose histograms carry their scope label; the others' are counted under scope=\"\" (empty: no scope label on histograms)")
	fs.DurationVar(&cfg.DrainDelay, "drain-delay", server.DefaultDrainDelay, "after SIGTERM: how long calls are still served while /readyz answers 503")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", server.DefaultShutdownGrace, "after the drain: how long calls in flight may finish before they are cut")
	fs.DurationVar(&cfg.Sweep.Interval, "sweep-interval", sweeper.DefaultInterval, "tick of the sweep: scopes with work due are looked at this often")
	fs.DurationVar(&cfg.Sweep.Watch, "watch-interval", 0, "interval of the watch jobs: dead pods and health probes, each pod once per its probe_period_s (default --sweep-interval)")
	fs.DurationVar(&cfg.Sweep.Reconcile, "reconcile-interval", sweeper.DefaultReconcile, "interval of the full pass, an audit of what the pod events, the config changes and the due notes keep right: reconcile with the driver and the config store, every scope's due time again; it logs what it had to fix, which should be nothing")
	fs.Float64Var(&cfg.Sweep.PassDuty, "reconcile-duty", sweeper.DefaultPassDuty, "share of its wall time the full pass works: it waits between scopes so that it keeps at most this much of a core and of Redis busy (1 = flat out)")
	fs.DurationVar(&cfg.RM.Lease, "deploy-lease", rm.DefaultLease, "deploy lease: how long a crashed leader blocks its deploy slot")
	fs.DurationVar(&cfg.RM.ClaimTTL, "claim-ttl", rm.DefaultClaimTTL, "how long a slot reserved for a route (a leader's or a follower's) stays reserved when its route never binds it")
	fs.DurationVar(&cfg.LockLease, "job-lease", sweeper.DefaultLockLease, "lease of the background jobs' locks: how long a crashed job holder blocks a job")
	fs.DurationVar(&cfg.Sweep.OrphanGrace, "orphan-grace", sweeper.DefaultOrphanGrace, "how long a pod Redis does not know is left alone (a deploy about to register); past it, one whose deploy lease is dead is adopted or deleted by the watch")
	fs.DurationVar(&cfg.Sweep.GhostGrace, "ghost-grace", sweeper.DefaultGhostGrace, "how long a registered pod missing from the driver's list is kept (the list may lag)")
	fs.IntVar(&cfg.Sweep.HealthFailThreshold, "health-fail-threshold", sweeper.DefaultHealthFailThreshold, "failed health probes in a row before a pod is replaced")
	fs.IntVar(&cfg.MaxPodsTotal, "max-pods-total", 0, "most pods of every scope together, shared between tenants by their weights while it binds; every replica the same (0: no cap)")
	fs.BoolVar(&cfg.Dev, "dev", false, "development mode: embedded in-process Redis, local driver and a ready 'demo' scope")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "", "json or text (default json; text with --dev)")
	fs.VisitAll(func(f *flag.Flag) { f.Usage += " [" + envName(f.Name) + "]" })
	return fs
}

// envName is the environment variable of a serve flag: WARMPOOL_ and the flag's name
// in upper case with '-' as '_'.
func envName(flagName string) string {
	return "WARMPOOL_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyEnv sets every flag of fs whose environment variable is set; a value that does
// not parse is an error naming the variable. Flags on the command line, parsed after,
// win over the environment.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if v := getenv(name); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: invalid value for --%s: %s", name, v, f.Name, want(f)))
			}
		}
	})
	return errors.Join(errs...)
}

// want says what a flag's value must look like.
func want(f *flag.Flag) string {
	switch f.Value.(flag.Getter).Get().(type) {
	case time.Duration:
		return "want a duration such as 500ms, 5s or 1m30s"
	case bool:
		return "want true or false"
	case int:
		return "want an integer"
	case float64:
		return "want a number"
	}
	return "not accepted"
}

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var cfg server.Config
	var o serveOptions
	fs := serveFlags(&cfg, &o, getenv)
	fs.SetOutput(stderr)
	if err := applyEnv(fs, getenv); err != nil {
		return usageError("serve: " + err.Error())
	}
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Sprintf("serve: unexpected argument %q", fs.Arg(0)))
	}
	if _, err := path.Match(cfg.Metrics.ScopeDetail, ""); err != nil {
		return usageError(fmt.Sprintf("serve: --metrics-scope-detail %q: want a glob such as team-* (%v)", cfg.Metrics.ScopeDetail, err))
	}
	if cfg.RedisURL == "" && !cfg.Dev {
		return usageError("serve: pass --redis URL (or WARMPOOL_REDIS), or --dev for an in-process Redis")
	}
	if err := pickDriver(&cfg, &o); err != nil {
		return err
	}
	log, err := newLogger(stderr, o.logLevel, o.logFormat, cfg.Dev)
	if err != nil {
		return err
	}
	cfg.Logger = log
	if cfg.Dev {
		cfg.RedisURL = ""
	}
	if cfg.AuthToken == "" && cfg.AuthTokenFile == "" {
		log.Warn("no --auth-token: the gateway calls of the API are open to anyone who can reach it")
	}

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	srv, err := server.New(ctx, cfg)
	if err != nil {
		ln.Close()
		return err
	}
	addr := "http://" + ln.Addr().String()
	curl := ""
	if cfg.Dev {
		auth := ""
		if cfg.AuthToken != "" {
			auth = " -H 'Authorization: Bearer " + cfg.AuthToken + "'"
		}
		curl = fmt.Sprintf("curl -s -X POST%s %s/v1/scopes/%s/sessions -d '{\"session_id\":\"s1\"}'", auth, addr, server.DemoScope)
	}
	// With JSON logs every line a collector reads is JSON, the banner included.
	if jsonLogs(o.logFormat, cfg.Dev) {
		log.Info("listening", "instance", srv.InstanceID(), "addr", addr)
		if curl != "" {
			log.Info("route a session", "curl", curl)
		}
	} else {
		// The banner is for a terminal: a closed stdout must not stop the service.
		_, _ = fmt.Fprintf(stdout, "warmpool %s listening on %s\n", srv.InstanceID(), addr)
		if curl != "" {
			_, _ = fmt.Fprintf(stdout, "route a session:\n  %s\n", curl)
		}
	}
	return srv.Run(ctx, ln)
}

// pickDriver sets the driver of cfg: the one --driver names, else with --dev the
// local one. Without either serve refuses to start rather than run local processes on
// a host meant for a cluster. It also sets the deploy policy, which renders a scope's
// pod in the namespace the driver's Factory names.
func pickDriver(cfg *server.Config, o *serveOptions) error {
	name := o.driver
	if name == "" {
		if !cfg.Dev {
			return usageError("serve: pass --driver NAME (or WARMPOOL_DRIVER), one of " + driver.List() + "; only --dev runs " + devDriver + " without it")
		}
		name = devDriver
	}
	f, err := o.drivers.Pick(name)
	if err != nil {
		return usageError("serve: " + err.Error())
	}
	policy, err := o.policy.build(f)
	if err != nil {
		return usageError("serve: " + err.Error())
	}
	cfg.DriverName, cfg.NewDriver, cfg.DeployPolicy = name, f.New, policy
	return nil
}

// newLogger is the service's logger: JSON lines, or text (the default with --dev).
func newLogger(w io.Writer, level, format string, dev bool) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError(fmt.Sprintf("--log-level %q: want debug, info, warn or error", level))
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "", "json", "text":
	default:
		return nil, usageError(fmt.Sprintf("--log-format %q: want json or text", format))
	}
	if jsonLogs(format, dev) {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// jsonLogs reports whether the service logs JSON lines: --log-format json, or no
// --log-format without --dev. A format newLogger refuses is neither.
func jsonLogs(format string, dev bool) bool {
	return format == "json" || (format == "" && !dev)
}

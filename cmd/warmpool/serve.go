package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/warmpool/warmpool/k8s"
	"github.com/warmpool/warmpool/lua"
	"github.com/warmpool/warmpool/rm"
	"github.com/warmpool/warmpool/server"
	"github.com/warmpool/warmpool/sweeper"
)

// envOr returns the env var's value, or def when it is unset.
func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg server.Config
	listen := fs.String("listen", envOr(getenv, "WARMPOOL_LISTEN", server.DefaultListen), "HTTP listen address [WARMPOOL_LISTEN]")
	fs.StringVar(&cfg.RedisURL, "redis", getenv("WARMPOOL_REDIS"), "redis:// URL, or host:port,host:port,… for a Cluster; empty = embedded in-process Redis (dev only) [WARMPOOL_REDIS]")
	fs.StringVar(&cfg.StorePath, "store", envOr(getenv, "WARMPOOL_STORE", server.DefaultStore), "config store: FILE or sqlite://FILE (SQLite), or postgres://user:pass@host:port/db?sslmode=… (PostgreSQL, shared by replicas) [WARMPOOL_STORE]")
	fs.StringVar(&cfg.DriverName, "driver", envOr(getenv, "WARMPOOL_DRIVER", server.DefaultDriver), "pod driver: local, kubernetes or fake [WARMPOOL_DRIVER]")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", getenv("KUBECONFIG"), "kubeconfig path; empty = in-cluster config [KUBECONFIG]")
	fs.StringVar(&cfg.Namespace, "namespace", getenv("WARMPOOL_NAMESPACE"), "namespace of pods whose scope names none [WARMPOOL_NAMESPACE]")
	qps := fs.Float64("kube-qps", k8s.DefaultQPS, "Kubernetes client QPS")
	fs.IntVar(&cfg.KubeBurst, "kube-burst", k8s.DefaultBurst, "Kubernetes client burst")
	fs.StringVar(&cfg.InstanceID, "instance-id", getenv("WARMPOOL_INSTANCE_ID"), "replica name (default hostname + random suffix) [WARMPOOL_INSTANCE_ID]")
	fs.StringVar(&cfg.AuthToken, "auth-token", getenv("WARMPOOL_AUTH_TOKEN"), "bearer token required on /v1 (empty = no auth) [WARMPOOL_AUTH_TOKEN]")
	fs.StringVar(&cfg.Prefix, "prefix", envOr(getenv, "WARMPOOL_PREFIX", lua.DefaultPrefix), "Redis key prefix [WARMPOOL_PREFIX]")
	fs.DurationVar(&cfg.Sweep.Interval, "sweep-interval", durationEnv(getenv, "WARMPOOL_SWEEP_INTERVAL", sweeper.DefaultInterval), "interval of the background jobs [WARMPOOL_SWEEP_INTERVAL]")
	fs.DurationVar(&cfg.Sweep.Autoscale, "autoscale-interval", 0, "interval of the autoscale job (default --sweep-interval)")
	fs.DurationVar(&cfg.Sweep.Reclaim, "reclaim-interval", 0, "interval of the reclaim job (default --sweep-interval)")
	fs.DurationVar(&cfg.Sweep.Watch, "watch-interval", 0, "interval of the watch job: dead pods and health probes (default --sweep-interval)")
	fs.DurationVar(&cfg.Sweep.Reconcile, "reconcile-interval", 0, "interval of the reconcile job (default --sweep-interval)")
	fs.DurationVar(&cfg.Sweep.Sessions, "session-sweep-interval", 0, "interval of the session expiry job (default --sweep-interval)")
	fs.DurationVar(&cfg.RM.Lease, "deploy-lease", rm.DefaultLease, "deploy lease: how long a crashed leader blocks its deploy slot")
	fs.IntVar(&cfg.Sweep.HealthFailThreshold, "health-fail-threshold", sweeper.DefaultHealthFailThreshold, "failed health probes in a row before a pod is replaced")
	fs.StringVar(&cfg.LocalStateDir, "local-state-dir", getenv("WARMPOOL_LOCAL_STATE_DIR"), "local driver: directory where pods are registered; replicas on one machine share it [WARMPOOL_LOCAL_STATE_DIR]")
	fs.DurationVar(&cfg.FakeDeployDelay, "fake-deploy-delay", 0, "testing: with --driver fake, how long each deploy takes (for load tests of cold bursts)")
	fs.BoolVar(&cfg.Dev, "dev", false, "development mode: embedded Redis, local driver and a ready 'demo' scope")
	level := fs.String("log-level", envOr(getenv, "WARMPOOL_LOG_LEVEL", "info"), "debug, info, warn or error [WARMPOOL_LOG_LEVEL]")
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	cfg.KubeQPS = float32(*qps)
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("--log-level %q: %w", *level, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))
	cfg.Logger = log
	if cfg.Dev {
		cfg.RedisURL = ""
	}
	if cfg.AuthToken == "" {
		log.Warn("no --auth-token: the API is open to anyone who can reach it")
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv, err := server.New(ctx, cfg)
	if err != nil {
		ln.Close()
		return err
	}
	addr := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "warmpool %s listening on %s\n", srv.InstanceID(), addr)
	if cfg.Dev {
		auth := ""
		if cfg.AuthToken != "" {
			auth = " -H 'Authorization: Bearer " + cfg.AuthToken + "'"
		}
		fmt.Fprintf(stdout, "route a session:\n  curl -s -X POST%s %s/v1/scopes/%s/sessions -d '{\"session_id\":\"s1\"}'\n", auth, addr, server.DemoScope)
	}
	err = srv.Run(ctx, ln)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

func durationEnv(getenv func(string) string, name string, def time.Duration) time.Duration {
	v := getenv(name)
	if v == "" {
		return def
	}
	if d, err := time.ParseDuration(v); err == nil {
		return d
	}
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second
	}
	return def
}

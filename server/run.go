package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/sweeper"
)

// bootstrap makes a live keyspace: on an empty Redis (or one that lost its data) the
// reconcile job rebuilds it from the config store and the driver, and on a keyspace of
// an older layout (lua.IndexLayout) the index job builds every scope's indexes. When
// another replica holds the job, this one waits for it.
func (s *Server) bootstrap(ctx context.Context) error {
	if err := s.awaitRedis(ctx); err != nil {
		return err
	}
	for {
		live, err := s.store.EpochLive(ctx)
		if warmpool.ErrorCode(err) == warmpool.CodeStoreUnavailable {
			// Redis is not up yet (or restarting).
			if err := s.waitForRedis(ctx, err); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		job := s.Sweeper.ReconcileJob()
		if live {
			current, err := s.store.LayoutCurrent(ctx)
			if err != nil {
				return fmt.Errorf("redis: %w", err)
			}
			if current {
				return nil
			}
			// An older release wrote the keyspace: its scopes have no indexes, and
			// the scripts would find no free slot and miss a purged pod's sessions.
			job = s.Sweeper.IndexJob()
		}
		ran, err := s.Runner.RunOnce(ctx, job)
		if ran && err == nil {
			continue
		}
		// Another replica rebuilds (look again soon), or the rebuild failed (the runner
		// logged why; try again a second later rather than at once).
		wait := 100 * time.Millisecond
		if err != nil {
			wait = time.Second
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (s *Server) ensureDemoScope(ctx context.Context) error {
	_, err := s.Scopes.Get(ctx, DemoScope)
	if warmpool.ErrorCode(err) != warmpool.CodeScopeNotFound {
		return err
	}
	_, err = s.Scopes.Put(ctx, DemoScope, warmpool.DefaultScopeConfig())
	if warmpool.ErrorCode(err) == warmpool.CodeValidation {
		// The operator's deploy policy (--image-prefixes, say) refuses the demo agent:
		// the replica serves without the demo scope rather than not at all.
		s.log.WarnContext(ctx, "no demo scope: the deploy policy refuses it", "err", err)
		return nil
	}
	return err
}

// Run serves HTTP on ln (and /metrics on the metrics listener and the E2B front door on
// its listener, when there are) and
// runs the background jobs until ctx ends, then shuts down in stages, each logged: it
// drains (/readyz answers 503 while calls are still served for DrainDelay, so that
// load balancers take the replica out first), closes the listeners and lets the calls
// in flight finish within ShutdownGrace (cutting those still running then), stops the
// jobs (releasing their locks), and closes everything it built.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	srv := s.apiServer(s.handler)
	errc := make(chan error, 3)
	go func() { errc <- srv.Serve(ln) }()
	servers := []*http.Server{srv}
	if s.e2bLn != nil {
		esrv := s.apiServer(s.e2b)
		go func() { errc <- esrv.Serve(s.e2bLn) }()
		servers = append(servers, esrv)
		s.log.Info("serving the E2B front door", "addr", s.e2bLn.Addr().String())
	}
	var msrv *http.Server
	if s.metricsLn != nil {
		msrv = s.metricsServer()
		go func() { errc <- msrv.Serve(s.metricsLn) }()
		s.log.Info("serving /metrics alone", "addr", s.metricsLn.Addr().String())
	}
	jobs, stopJobs := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Runner.Run(jobs) })
	wg.Go(func() { _ = s.Sweeper.Follow(jobs) }) // it ends when jobs does
	wg.Go(func() { sweeper.Every(jobs, ClockCheckInterval, s.measureClock) })
	var err error
	select {
	case <-ctx.Done():
		err = s.drain(errc)
	case err = <-errc:
	}
	shutdown, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
	defer cancel()
	serr := s.shutdown(shutdown, servers)
	if msrv != nil {
		// Scrapes end within their timeout; the grace left bounds them all the same.
		if err := msrv.Shutdown(shutdown); errors.Is(err, context.DeadlineExceeded) {
			_ = msrv.Close()
		}
	}
	err = cmp.Or(err, serr)
	stopJobs()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	err = errors.Join(err, s.Close())
	s.log.Info("stopped")
	return err
}

// apiServer is the HTTP server of an API's handler: the main listener's, the E2B
// front door's. The write timeout is the bound of a call that does not wait;
// httpx.Bounds sets each call's own deadline, and lifts it for the routes that wait.
func (s *Server) apiServer(h http.Handler) *http.Server {
	t := s.cfg.HTTP
	return &http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read,
		WriteTimeout: t.Call + httpx.WriteMargin, IdleTimeout: t.Idle, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
}

// shutdown closes the servers' listeners at once and lets their calls in flight
// finish until ctx ends, then cuts those still running.
func (s *Server) shutdown(ctx context.Context, servers []*http.Server) error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() {
			errs[i] = srv.Shutdown(ctx)
			if errors.Is(errs[i], context.DeadlineExceeded) {
				s.log.Warn("shutdown grace is over: cutting the calls still in flight", "shutdown_grace", s.cfg.ShutdownGrace)
				errs[i] = srv.Close()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// drain marks the replica as draining and keeps serving for DrainDelay, unless the
// server fails first (its error is returned).
func (s *Server) drain(errc <-chan error) error {
	s.draining.Store(true)
	s.log.Info("draining: /readyz answers 503, calls are still served", "drain_delay", s.cfg.DrainDelay)
	timer := time.NewTimer(s.cfg.DrainDelay)
	defer timer.Stop()
	select {
	case <-timer.C:
	case err := <-errc:
		return err
	}
	s.log.Info("shutting down: listener closed, calls in flight may finish", "shutdown_grace", s.cfg.ShutdownGrace)
	return nil
}

// Close stops the managers and releases what New built, in reverse order.
func (s *Server) Close() error {
	var err error
	s.once.Do(func() {
		if s.SM != nil {
			s.SM.Close()
		}
		if s.RM != nil {
			s.RM.Close()
		}
		for i := len(s.closers) - 1; i >= 0; i-- {
			err = errors.Join(err, s.closers[i]())
		}
	})
	return err
}

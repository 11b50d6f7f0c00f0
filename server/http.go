package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/api"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/internal/metrics"
)

// routes is the replica's router: its middleware around api.Router, which lists
// every route.
func (s *Server) routes() http.Handler {
	var metricsHandler http.Handler
	if s.cfg.MetricsListen == "" {
		metricsHandler = s.metrics.Handler()
	}
	return api.Router(api.Services{Sessions: s.SM, Pods: s.RM, ScopeList: s.ui, Configs: s.Scopes, PoolPage: s.ui, Tenants: s.Tenants,
		Reports: s.Reports, SessionConfigs: s.sessionConfigs, ReportKey: s.reportKey, ObserveReport: s.metrics.ObserveReport,
		Health: s.handleHealth, Ready: s.handleReady, Metrics: metricsHandler, Auth: s.auth, Log: s.log},
		httpx.RequestID, httpx.Recover(s.log), httpx.AccessLog(s.log), s.closeWhileDraining,
		httpx.Bounds(s.cfg.HTTP.Call, s.cfg.HTTP.Wait), httpx.LimitBody(s.log))
}

// metricsServer serves /metrics and nothing else (SPEC §11.5), on the listener of
// Config.MetricsListen. A scrape is one GET without a body, whose answer's write
// deadline the metrics handler sets itself (metrics.Config.ScrapeTimeout).
func (s *Server) metricsServer() *http.Server {
	r := chi.NewRouter()
	r.Use(httpx.RequestID, httpx.Recover(s.log), httpx.AccessLog(s.log))
	r.NotFound(httpx.NotFound)
	r.MethodNotAllowed(httpx.MethodNotAllowed)
	r.Method(http.MethodGet, "/metrics", s.metrics.Handler())
	t := s.cfg.HTTP
	return &http.Server{Handler: r, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.ReadHeader,
		WriteTimeout: metrics.DefaultScrapeTimeout, IdleTimeout: t.Idle, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
}

// MetricsAddr is the address of the metrics listener ("" when /metrics is served on
// the main one).
func (s *Server) MetricsAddr() string {
	if s.metricsLn == nil {
		return ""
	}
	return s.metricsLn.Addr().String()
}

// handleHealth answers liveness without a Redis call.
func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) error {
	return httpx.OK(w, map[string]string{"status": "ok", "instance_id": s.cfg.InstanceID})
}

// closeWhileDraining asks clients to close their connection after each answer once
// the replica drains, so that their next call opens one to another replica.
func (s *Server) closeWhileDraining(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// handleReady answers 200 when Redis answers and holds a live keyspace, and 503 from
// the moment the replica drains.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) error {
	if s.draining.Load() {
		httpx.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining", "instance_id": s.cfg.InstanceID})
		return nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		return err
	}
	live, err := s.store.EpochLive(ctx)
	if err != nil || !live {
		return warmpool.ErrEpochLost
	}
	return httpx.OK(w, map[string]string{"status": "ready", "instance_id": s.cfg.InstanceID})
}

// Handler is the HTTP API of the replica.
func (s *Server) Handler() http.Handler { return s.handler }

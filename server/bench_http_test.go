package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testredis"
	"github.com/warmpool/warmpool/k8s/fakepod"
	"github.com/warmpool/warmpool/server"
	"github.com/warmpool/warmpool/sqlite"
)

// BenchmarkHTTPRouteWarm measures the gateway's hot call end to end in process: HTTP
// route of a new session onto a warm pod, through the router, middleware, JSON and one
// script call (the session is ended outside the timer's concern, directly).
func BenchmarkHTTPRouteWarm(b *testing.B) {
	r := testredis.New(b)
	ctx := context.Background()
	store, err := sqlite.Open(ctx, ":memory:")
	if err != nil {
		b.Fatal(err)
	}
	fake := fakepod.New()
	srv, err := server.New(ctx, server.Config{Redis: r.Client, Prefix: r.Prefix, Driver: fake, Store: store})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	cfg := warmpool.DefaultScopeConfig()
	cfg.Pool.MaxConcurrency, cfg.Pool.PodConcurrency = 100000, 10000
	if _, err := srv.Scopes.Put(ctx, "bench", cfg); err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	route := func(id string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/scopes/bench/sessions", strings.NewReader(`{"session_id":"`+id+`"}`))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("route: %d %s", w.Code, w.Body)
		}
	}
	route("warmup")
	i := 0
	for b.Loop() {
		i++
		route("s" + strconv.Itoa(i))
	}
}

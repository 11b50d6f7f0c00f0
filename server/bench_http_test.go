package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/cputime"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/server"
	"github.com/warmpool/warmpool/sqlite"
)

// BenchmarkHTTPRouteWarm measures the gateway's hot call end to end in process: HTTP
// route of a new session onto a warm pod, through the router, middleware, JSON and one
// script call (the session is ended outside the timer's concern, directly).
func BenchmarkHTTPRouteWarm(b *testing.B) {
	h := benchServer(b)
	route := func(id string) {
		if w := benchRoute(h, id); w.Code != http.StatusOK {
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

// BenchmarkHTTPRouteAffinity measures the call `wpbench baseline` compares with the
// bare handler of scripts/routebaseline: the HTTP route of a session bound already
// (an affinity route), in process. Its cpu-ns/op is the figure that comparison takes,
// where ns/op is mostly the wait for Redis.
func BenchmarkHTTPRouteAffinity(b *testing.B) {
	h := benchServer(b)
	const sessions = 64
	for i := range sessions {
		if w := benchRoute(h, "s"+strconv.Itoa(i)); w.Code != http.StatusOK {
			b.Fatalf("route: %d %s", w.Code, w.Body)
		}
	}
	cpu := cputime.Now(b)
	i := 0
	for b.Loop() {
		i++
		if w := benchRoute(h, "s"+strconv.Itoa(i%sessions)); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"new":false`) {
			b.Fatalf("route: %d %s", w.Code, w.Body)
		}
	}
	cputime.Report(b, cpu)
}

// benchRoute routes session through h.
func benchRoute(h http.Handler, session string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/scopes/bench/sessions", strings.NewReader(`{"session_id":"`+session+`"}`))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// benchServer is a replica on the test Redis with a scope "bench" of room enough for
// every session a benchmark routes; it returns the replica's handler.
func benchServer(b *testing.B) http.Handler {
	r := testredis.New(b)
	ctx := context.Background()
	store, err := sqlite.Open(ctx, ":memory:")
	if err != nil {
		b.Fatal(err)
	}
	fake := fake.New()
	srv, err := server.New(ctx, server.Config{Redis: r.Client, Prefix: r.Prefix, Driver: fake, Store: store})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	cfg := warmpool.DefaultScopeConfig()
	cfg.Pool.MaxConcurrency, cfg.Pool.PodConcurrency = 100000, 10000
	if _, err := srv.Scopes.Put(ctx, "bench", cfg); err != nil {
		b.Fatal(err)
	}
	return srv.Handler()
}

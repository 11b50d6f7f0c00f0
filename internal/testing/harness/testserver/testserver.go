// Package testserver builds complete replicas (server.New) for tests: on the test
// Redis (testredis), an in-memory SQLite config store and the fake pod driver, each
// served over loopback by httptest. Several replicas built on one Backing share those
// services as replicas behind a load balancer do.
package testserver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/server"
	"github.com/warmpool/warmpool/sm"
	"github.com/warmpool/warmpool/sqlite"
	"github.com/warmpool/warmpool/sweeper"
)

// Backing is what the replicas of one test share: Redis under the test's own key
// prefix, a config store and a pod driver. Everything is closed with the test.
type Backing struct {
	Redis *testredis.Redis
	Store *sqlite.Store
	Fake  *fake.Driver
}

// NewBacking returns the shared services of one test.
func NewBacking(tb testing.TB) *Backing {
	tb.Helper()
	r := testredis.New(tb)
	st, err := sqlite.Open(context.Background(), ":memory:")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	fake := fake.New()
	tb.Cleanup(func() { _ = fake.Close() })
	return &Backing{Redis: r, Store: st, Fake: fake}
}

// Config is the config of a replica named instanceID on b: b's Redis client and
// prefix, driver and store, and a short waiter recheck so queued routes in tests
// notice freed capacity fast. Callers change what their test needs.
func (b *Backing) Config(instanceID string) server.Config {
	return server.Config{
		Redis:      b.Redis.Client,
		Prefix:     b.Redis.Prefix,
		Driver:     b.Fake,
		DriverName: fake.Name,
		Store:      b.Store,
		InstanceID: instanceID,
		SM:         sm.Config{Recheck: 50 * time.Millisecond},
		// The full pass runs flat out: the tests wait for it.
		Sweep: sweeper.Config{PassDuty: 1},
	}
}

// Serve builds the replica from cfg and serves its HTTP API; both are closed with the
// test. The replica's background jobs do not run unless the test runs them.
func Serve(tb testing.TB, cfg server.Config) (*server.Server, *httptest.Server) {
	tb.Helper()
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("%s: %v", cfg.InstanceID, err)
	}
	tb.Cleanup(func() { _ = srv.Close() })
	ts := httptest.NewServer(srv.Handler())
	tb.Cleanup(ts.Close)
	return srv, ts
}

// Do sends req with the default client and returns the answer with its whole body
// read (and closed); the test fails when either fails.
func Do(tb testing.TB, req *http.Request) (*http.Response, []byte) {
	tb.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return res, raw
}

package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/testpg"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/server"
)

// Two replicas that each open --store postgres://… (one Redis, one database): config
// writes through either one make one history, and each reads what the other wrote.
func TestReplicasSharePostgresStore(t *testing.T) {
	ctx := context.Background()
	dsn := testpg.DSN(t)
	r := testredis.New(t)
	var urls []string
	for i := range 2 {
		fake := fake.New()
		t.Cleanup(func() { _ = fake.Close() })
		srv, err := server.New(ctx, server.Config{
			Redis: r.Client, Prefix: r.Prefix, Driver: fake, StorePath: dsn,
			InstanceID: fmt.Sprintf("pg-replica-%d", i),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		ts := httptest.NewServer(srv.Handler())
		t.Cleanup(ts.Close)
		urls = append(urls, ts.URL)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	call := func(method, url, body string) map[string]any {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s %s -> %d %v", method, url, res.StatusCode, m)
		}
		return m
	}
	for v := 1; v <= 4; v++ {
		writer, reader := urls[v%2], urls[(v+1)%2]
		image := fmt.Sprintf("agent:%d", v)
		put := call(http.MethodPut, writer+"/v1/scopes/shared/config", `{"deploy":{"image":"`+image+`"}}`)
		if put["version"] != float64(v) {
			t.Fatalf("PUT %d answered version %v", v, put["version"])
		}
		got := call(http.MethodGet, reader+"/v1/scopes/shared/config", "")
		deploy, _ := got["config"].(map[string]any)["deploy"].(map[string]any)
		if got["version"] != float64(v) || deploy["image"] != image {
			t.Fatalf("the other replica reads %v, want version %d with image %s", got, v, image)
		}
	}
}

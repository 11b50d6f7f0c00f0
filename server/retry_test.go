package server_test

import (
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/server"
)

// TestRetryAfterFromDeployEstimate: once the scope has learned that its deploys take
// 3 s, a route refused while a deploy is in flight is told to come back when that
// deploy should be ready (at least 2 s for a call that arrives at once, at most the
// first deploy's time), in the body and the Retry-After header; a refusal with no
// deploy in flight keeps 1 s.
func TestRetryAfterFromDeployEstimate(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, func(c *server.Config) { c.Clock = warmpool.SystemClock{} })
	e.fake.SetDeployDelay(3 * time.Second)
	e.putScope("slow", scopeCfg(2, 1, 0, 1)) // max_pods 2, no queue

	// A 3 s deploy: the estimate learns its time, which the route took at least (more
	// than 3 s on a loaded machine).
	first := e.do(http.MethodPost, "/v1/scopes/slow/sessions", `{"session_id":"s1"}`)
	if first.status != http.StatusOK {
		t.Fatalf("the first route: %v", first)
	}
	most := int(math.Ceil(first.took.Seconds()))
	done := make(chan resp, 1)
	go func() {
		done <- e.do(http.MethodPost, "/v1/scopes/slow/sessions", `{"session_id":"s2"}`)
	}()
	await.True(t, 5*time.Second, "the second deploy starts", func() bool { return e.fake.InFlight() == 1 })

	r := e.do(http.MethodPost, "/v1/scopes/slow/sessions", `{"session_id":"s3"}`)
	eo := e.wantErr(r, http.StatusServiceUnavailable, warmpool.CodeNoPodAvailable)
	ra, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || ra < 2 || ra > most {
		t.Fatalf("Retry-After %q during a 3 s deploy that just started, want 2 to %d (the first route took %s): %v",
			r.header.Get("Retry-After"), most, first.took, eo)
	}
	if s2 := <-done; s2.status != http.StatusOK {
		t.Fatalf("the route that deployed: %v", s2)
	}

	// Both pods busy, nothing in flight: nothing to wait for but a session's end.
	r = e.do(http.MethodPost, "/v1/scopes/slow/sessions", `{"session_id":"s4"}`)
	e.wantErr(r, http.StatusServiceUnavailable, warmpool.CodeNoPodAvailable)
	if got := r.header.Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After %q with no deploy in flight, want 1", got)
	}
}

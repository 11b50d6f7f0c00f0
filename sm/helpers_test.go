package sm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/sm"
)

// go-redis ends its pub/sub goroutines on Close, so the whole package is checked for
// leaked goroutines (the wake-up subscriptions of every replica included).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// replica starts a replica on the harness and returns its session manager.
func replica(h *replicatest.Harness, cfg replicatest.Config) *sm.Manager {
	return h.Replica(cfg).SM
}

type routed struct {
	b    warmpool.Binding
	err  error
	took time.Duration
}

// routeAsync routes in the background; the outcome arrives on the channel.
func routeAsync(m *sm.Manager, scope, session, requestID string) <-chan routed {
	ch := make(chan routed, 1)
	go func() {
		start := time.Now()
		b, err := m.Route(context.Background(), scope, session, requestID)
		ch <- routed{b, err, time.Since(start)}
	}()
	return ch
}

func mustRoute(t *testing.T, m *sm.Manager, scope, session string) warmpool.Binding {
	t.Helper()
	b, err := m.Route(context.Background(), scope, session, "")
	if err != nil {
		t.Fatalf("route %s/%s: %v", scope, session, err)
	}
	return b
}

// wantCode fails unless err carries code (and, for the 503 codes and WAIT_TIMEOUT, a
// retry_after).
func wantCode(t *testing.T, what string, err error, code warmpool.Code) {
	t.Helper()
	if got := warmpool.ErrorCode(err); got != code {
		t.Fatalf("%s: error %v (code %s), want %s", what, err, got, code)
	}
	var e *warmpool.Error
	errors.As(err, &e)
	if (httpx.Status(code) == 503 || code == warmpool.CodeWaitTimeout) && e.RetryAfter < 1 {
		t.Fatalf("%s: %s without retry_after: %v", what, code, err)
	}
}

package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// Every guarded script that Redis runs after its caller's deadline answers
// {"DEADLINE"} and writes nothing, whatever its other arguments; the others are the
// ones that only give back, read or raise.
func TestGuardRefusesCallsPastTheirDeadline(t *testing.T) {
	r := testredis.New(t)
	ctx := context.Background()
	keys := make([]string, 13)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s{s}:k%d", r.Prefix, i)
	}
	want := map[string]bool{}
	for _, name := range []string{"pod_acquire", "pod_register", "pod_purge", "pod_placeholder", "hold_touch",
		"pod_adopt", "pod_health", "deploy_extend", "lock_obtain", "lock_extend", "session_route", "session_touch", "session_deadline",
		"session_end", "session_evict", "scope_publish", "scope_repair", "idem_claim", "scope_delete", "scope_forget",
		"agent_report", "tenant_grant", "total_grant"} {
		want[name+".lua"] = true
	}
	for name := range redisstore.Scripts {
		if redisstore.Guarded[name] != want[name] {
			t.Errorf("%s: guarded %v, want %v", name, redisstore.Guarded[name], want[name])
		}
	}
	for name := range redisstore.Guarded {
		sc := redisstore.Scripts[name]
		// Arguments a script would write with, then a deadline long past.
		args := []any{"1", "a", "b", "c", "d", "e", "f", "g", "h", "1"}
		v, err := sc.Run(ctx, r.Client, keys, args...).Result()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got, ok := v.([]any); !ok || len(got) != 1 || got[0] != "DEADLINE" {
			t.Errorf("%s past its deadline answered %v, want [DEADLINE]", name, v)
		}
	}
	n, err := r.Admin.Keys(ctx, r.Prefix+"*").Result()
	if err != nil || len(n) != 0 {
		t.Fatalf("refused calls wrote %v (%v)", n, err)
	}
}

// A guarded call's deadline is when its caller stops waiting: the client's read
// timeout from now, or the context's deadline when that comes first. A refusal is
// STORE_UNAVAILABLE, so the caller retries.
func TestGuardedCallsCarryTheCallersDeadline(t *testing.T) {
	const readTimeout = 700 * time.Millisecond
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: readTimeout})
	t.Cleanup(func() { _ = c.Close() })
	h := &cannedReplies{reply: []any{"touched"}}
	c.AddHook(h)
	s := redisstore.NewStore(c, "g:")
	last := func() time.Time {
		t.Helper()
		a := h.args[len(h.args)-1]
		n, err := strconv.ParseInt(fmt.Sprint(a[len(a)-1]), 10, 64)
		if err != nil {
			t.Fatalf("last argument of %v is not a deadline: %v", a, err)
		}
		return time.UnixMilli(n)
	}
	before := time.Now()
	if _, err := s.SessionTouch(context.Background(), "s", "x", time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if d := last(); d.Before(before.Add(readTimeout).Truncate(time.Millisecond)) || d.After(after.Add(readTimeout)) {
		t.Fatalf("deadline %v, want the read timeout (%s) from the call", d, readTimeout)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(200*time.Millisecond))
	defer cancel()
	dl, _ := ctx.Deadline()
	if _, err := s.SessionTouch(ctx, "s", "x", time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if d := last(); !d.Equal(dl.Truncate(time.Millisecond)) {
		t.Fatalf("deadline %v, want the context's %v", d, dl)
	}
	// An unguarded script gets no deadline.
	calls := len(h.args)
	h.reply = []any{"", "-1"}
	before = time.Now()
	if _, _, err := s.ClaimRelease(context.Background(), "s", "c1", time.UnixMilli(5)); err != nil {
		t.Fatal(err)
	}
	for _, a := range h.args[calls][3:] {
		n, err := strconv.ParseInt(fmt.Sprint(a), 10, 64)
		if err == nil && n >= before.Add(readTimeout).UnixMilli() && n <= time.Now().Add(readTimeout).UnixMilli() {
			t.Fatalf("claim_release got %v: an unguarded script takes no deadline", h.args[calls])
		}
	}
	h.reply = []any{"DEADLINE"}
	_, err := s.SessionTouch(context.Background(), "s", "x", time.Unix(0, 0))
	if warmpool.ErrorCode(err) != warmpool.CodeStoreUnavailable {
		t.Fatalf("a refused call: %v, want STORE_UNAVAILABLE", err)
	}
}

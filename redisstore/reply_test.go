package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// cannedReplies answers every script call with its reply field, without reaching
// Redis, and records the call's arguments; other commands pass through.
type cannedReplies struct {
	reply any
	args  [][]any
}

func (h *cannedReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cannedReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c, ok := cmd.(*redis.Cmd)
		if name := strings.ToLower(cmd.Name()); ok && (name == "evalsha" || name == "eval") {
			h.args = append(h.args, cmd.Args())
			c.SetVal(h.reply)
			return nil
		}
		return next(ctx, cmd)
	}
}

func (h *cannedReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Every wrapper reads its script's answer field by field: a well-formed answer decodes,
// and every answer cut short or with a field of the wrong type is an INTERNAL error,
// never a zero value or a panic.
func TestMalformedRepliesAreInternalErrors(t *testing.T) {
	e := newEnv(t, nil)
	h := &cannedReplies{}
	e.r.Client.AddHook(h)
	s, scope, now := e.store, e.scope, e.now
	pod := `{"id":"p1","scope_id":"s1","deploy_ver":"v1","sse_url":"http://x/sse"}`
	spec, ms := `{"image":"agent:1"}`, "1700000000000"
	since := now
	type call func(context.Context) error
	wrappers := []struct {
		name string
		run  call
		good []any
		// bad are answers malformed in ways that cutting or retyping a field of a
		// good answer does not show.
		bad [][]any
	}{
		{"pod_acquire", func(ctx context.Context) error {
			_, err := s.PodAcquire(ctx, scope, redisstore.AcquireArgs{Now: now, Claim: "c"})
			return err
		}, nil, [][]any{{"warm", "p1", ""}, {"warm", "p1", "{"}, {"max_reached", "two", "0"}, {"max_reached", "-1", "0"}, {"who knows"}}},
		{"pod_register", func(ctx context.Context) error {
			_, err := s.PodRegister(ctx, scope, "1", warmpool.Pod{ID: "p1"}, "", now, now)
			return err
		}, []any{"ok", "2"}, [][]any{{"ok", "2.5"}}},
		{"pod_purge", func(ctx context.Context) error { _, err := s.PodPurge(ctx, scope, "p1", "r", &since); return err },
			[]any{"purged", "1", "s1"}, [][]any{{"purged", "2", "s1"}}},
		{"pod_placeholder", func(ctx context.Context) error {
			_, err := s.PodPlaceholder(ctx, scope, now, now, now)
			return err
		}, []any{"deploy", "1w", "1", spec, "2000"}, nil},
		{"pod_adopt", func(ctx context.Context) error {
			_, err := s.PodAdopt(ctx, warmpool.Pod{ID: "p1", ScopeID: scope}, now, false)
			return err
		}, []any{"adopted"}, nil},
		{"pod_health", func(ctx context.Context) error { _, err := s.PodHealth(ctx, scope, "p1", false); return err }, []any{int64(2)}, nil},
		{"fence_raise", func(ctx context.Context) error { return s.FenceRaise(ctx, scope, 3) }, []any{int64(3)}, nil},
		{"deploy_extend", func(ctx context.Context) error { _, err := s.DeployExtend(ctx, scope, "1", now, now); return err }, []any{int64(1)}, [][]any{{int64(2)}}},
		{"deploy_abort", func(ctx context.Context) error {
			_, err := s.DeployAbort(ctx, scope, "1", "v", "r", false, now, now)
			return err
		}, []any{int64(1)}, nil},
		{"follower_wait", func(ctx context.Context) error {
			_, err := s.FollowerWait(ctx, scope, "1", "1|c", "c", now)
			return err
		}, []any{"failed", "why"}, nil},
		{"follower_leave", func(ctx context.Context) error { return s.FollowerLeave(ctx, scope, "1|c", "c", now) }, []any{int64(1)}, nil},
		{"claim_release", func(ctx context.Context) error { _, _, err := s.ClaimRelease(ctx, scope, "c", now); return err }, []any{"p1", "-1"}, nil},
		{"hold_touch", func(ctx context.Context) error { _, err := s.HoldTouch(ctx, scope, "h", "p1", now, nil); return err }, []any{"held", ms}, nil},
		{"hold_release", func(ctx context.Context) error { _, err := s.HoldRelease(ctx, scope, "h", "p1", now); return err }, []any{"released", "1"}, [][]any{{"released", "yes"}}},
		{"session_route", func(ctx context.Context) error {
			_, err := s.SessionRoute(ctx, scope, redisstore.RouteArgs{Now: now, Session: "s1"})
			return err
		}, []any{"new", "1", "p1", pod, "s1"}, [][]any{{"new", "yes", "p1", pod, "s1"}, {"queued", "-1", ms}, {"queued", "0", "soon"}, {"full", "x"}}},
		{"session_touch", func(ctx context.Context) error { _, err := s.SessionTouch(ctx, scope, "s1", now); return err }, []any{"expired"}, nil},
		{"session_deadline", func(ctx context.Context) error {
			_, err := s.SessionDeadline(ctx, scope, "s1", now, time.Minute, false)
			return err
		}, []any{"set", ms}, [][]any{{"set", "soon"}, {"set"}}},
		{"session_end", func(ctx context.Context) error { _, err := s.SessionEnd(ctx, scope, "s1", now); return err }, []any{"released", "p1"}, nil},
		{"session_evict", func(ctx context.Context) error { _, _, err := s.SessionEvict(ctx, scope, now, 10); return err }, []any{"1", "0"}, nil},
		{"session_get", func(ctx context.Context) error { _, err := s.SessionGet(ctx, scope, "s1", now); return err },
			[]any{"found", "p1", pod, ms}, [][]any{{"found", "p1", pod, "soon"}}},
		{"agent_report", func(ctx context.Context) error {
			_, err := s.AgentReport(ctx, redisstore.AgentReport{Scope: scope, Pod: "p1", Sessions: []string{"s1"}, Now: now})
			return err
		}, []any{"ok", "5000", "0", "0", "2", "0", "1", "s1"}, [][]any{{"ok", "5000", "0", "0", "2", "0", "2", "s1"}, {"ok", "soon", "0", "0", "2", "0", "0"}, {"ok", "5000", "0", "0", "-1", "0", "0"}, {"ok", "5000", "0", "0", "2", "none", "0"}, {"escrow", "some", "acme"}, {"gone"}}},
		{"report_cap", func(ctx context.Context) error { _, err := s.ReportCap(ctx, scope, "p1"); return err }, []any{"ok", "2"}, [][]any{{"ok", "-1"}, {"full", "2"}}},
		{"waiter_leave", func(ctx context.Context) error { return s.WaiterLeave(ctx, scope, "w", now) }, []any{int64(1)}, nil},
		{"scope_repair", func(ctx context.Context) error {
			_, err := s.ScopeRepair(ctx, scope, now, now, true)
			return err
		}, []any{"0", "1", "0", "0", "0"}, nil},
		{"idem_claim", func(ctx context.Context) error {
			_, err := s.IdemClaim(ctx, redisstore.IdemRequest{Scope: scope, ID: "r", Fingerprint: redisstore.AcquireFingerprint}, "t", time.Minute)
			return err
		}, []any{"done", "{}"}, [][]any{{"maybe"}}},
		{"idem_answer", func(ctx context.Context) error {
			_, err := s.IdemAnswer(ctx, scope, "r", "t", []byte("{}"), time.Minute)
			return err
		}, []any{int64(1)}, [][]any{{"OK"}}},
		{"idem_release", func(ctx context.Context) error { _, err := s.IdemRelease(ctx, scope, "r", "t"); return err },
			[]any{int64(0)}, [][]any{{int64(2)}}},
		{"lock_obtain", func(ctx context.Context) error {
			_, err := s.Obtain(ctx, s.Keys().Lock("x"), time.Minute)
			return err
		}, []any{int64(1)}, [][]any{{"OK"}}},
	}
	// pod_acquire's answers differ by kind: each is a good answer of its own.
	acquire := wrappers[0]
	for _, good := range [][]any{{"warm", "p1", pod}, {"follower", "1", "1|c", ms}, {"deploy", "1", "1", spec, "2000"}, {"max_reached", "0", "2"}} {
		acquire.good = good
		wrappers = append(wrappers, acquire)
	}
	wrappers = wrappers[1:]

	ctx := context.Background()
	for _, w := range wrappers {
		t.Run(fmt.Sprintf("%s%v", w.name, w.good), func(t *testing.T) {
			h.reply = w.good
			if len(w.good) == 1 {
				h.reply = w.good[0] // an integer reply comes alone, not in an array
			}
			if err := w.run(ctx); err != nil {
				t.Fatalf("well-formed answer %v: %v", w.good, err)
			}
			bad := append([][]any(nil), w.bad...)
			for n := range w.good {
				bad = append(bad, w.good[:n])
			}
			for i := range w.good {
				retyped := append([]any(nil), w.good...)
				retyped[i] = []any{"nested"}
				bad = append(bad, retyped)
			}
			for _, b := range bad {
				h.reply = b
				err := func() (err error) {
					defer func() {
						if p := recover(); p != nil {
							err = fmt.Errorf("panic: %v", p)
						}
					}()
					return w.run(ctx)
				}()
				if warmpool.ErrorCode(err) != warmpool.CodeInternal || !strings.Contains(fmt.Sprint(err), w.name+".lua") {
					t.Errorf("answer %#v: err = %v, want INTERNAL naming %s.lua", b, err, w.name)
				}
			}
		})
	}
}

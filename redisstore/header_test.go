package redisstore

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/lua"
)

// header is what a script's header (its opening comment lines) says of its KEYS and
// ARGV: the scope's keys and the extra keys its KEYS line names, how many KEYS lines
// it has, and the highest ARGV it names; open when that one is "ARGV[n..]" (n and
// those after, as many as the caller gives).
type header struct {
	scope, extra []string
	keysLines    int
	argv         int
	open         bool
}

var (
	headerArgv   = regexp.MustCompile(`ARGV\[(\d+)(\.\.)?\]`)
	bodyKeyField = regexp.MustCompile(`\bk\.([a-z_]+)`)
	// continued is a line that goes on with the line before it (a KEYS line).
	continued = regexp.MustCompile(`^--\s{2,}\S`)
)

// readScript splits a script's file into its header and its body. Its KEYS line is
// "-- KEYS: <scope keys> | extra: <extra keys>" (either list may be empty, the "|
// extra:" part left out without extra keys), continued on indented comment lines.
func readScript(t *testing.T, name string) (header, string) {
	t.Helper()
	b, err := lua.Files.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var h header
	n := 0
	for ; n < len(lines) && strings.HasPrefix(lines[n], "--"); n++ {
		line := lines[n]
		if keys, ok := strings.CutPrefix(line, "-- KEYS:"); ok {
			for n+1 < len(lines) && continued.MatchString(lines[n+1]) {
				n++
				keys += " " + strings.TrimPrefix(lines[n], "--")
			}
			scope, extra, _ := strings.Cut(keys, "|")
			extra, ok := strings.CutPrefix(strings.TrimSpace(extra), "extra:")
			if !ok && extra != "" {
				t.Errorf("%s: KEYS line %q: after | comes extra: <names>", name, keys)
			}
			h.scope, h.extra = strings.Fields(scope), strings.Fields(extra)
			h.keysLines++
			continue
		}
		for _, m := range headerArgv.FindAllStringSubmatch(line, -1) {
			if i, _ := strconv.Atoi(m[1]); i >= h.argv {
				h.argv, h.open = i, m[2] != ""
			}
		}
	}
	return h, strings.Join(lines[n:], "\n")
}

// scriptCalls records the KEYS and ARGV of every script call, by script, answering
// each call with reply, an integer command with 0 and every other command with
// redis.Nil, without a server.
type scriptCalls struct {
	reply any
	keys  map[string][]string
	argv  map[string][]any
}

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCalls) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return h.process
}

// process records one script call (a command alone or in a pipeline).
func (h *scriptCalls) process(_ context.Context, cmd redis.Cmder) error {
	args := cmd.Args()
	if name := strings.ToLower(cmd.Name()); name == "evalsha" || name == "eval" {
		for file, sc := range scripts {
			if args[1] == sc.Hash() || args[1] == Sources[file] {
				n, _ := strconv.Atoi(fmt.Sprint(args[2]))
				for _, k := range args[3 : 3+n] {
					h.keys[file] = append(h.keys[file], testredis.Arg(k))
				}
				h.argv[file] = args[3+n:]
			}
		}
		cmd.(*redis.Cmd).SetVal(h.reply)
		return nil
	}
	if c, ok := cmd.(*redis.IntCmd); ok {
		c.SetVal(0) // a wrapper's write before its script (ScopePublish's SADD)
		return nil
	}
	cmd.SetErr(redis.Nil)
	return redis.Nil
}

func (h *scriptCalls) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			_ = h.process(ctx, cmd) // each command keeps its own answer
		}
		return nil
	}
}

// Every script's header, its declaration in lua.go, the fixed order of a scope's keys
// and the keys its wrapper sends agree: the header's KEYS line names the scope's keys
// the script takes, in the fixed order (scopeKeyTable), then its extra keys, as lua.go
// declares them; the wrapper sends, key by key, the keys so named and as many ARGV as
// the header lists; and the body reads KEYS only through its key table, by the names
// it has.
func TestScriptHeadersWrappersAndKeyOrderAgree(t *testing.T) {
	const prefix, scope = "t:", "s1"
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	h := &scriptCalls{reply: []any{"?"}, keys: map[string][]string{}, argv: map[string][]any{}}
	c.AddHook(h)
	s := NewStore(c, prefix)
	callEveryWrapper(context.Background(), s, scope)
	// What callEveryWrapper gives for each extra key (its request id, pod and lock).
	k := s.Keys().Scope(scope)
	extraKeys := map[string]string{"idem_mark": k.IdemMark("r1"), "route_answer": k.RouteAnswer("r1"),
		"gone": k.Gone("p1"), "lock": s.Keys().Lock("x"), "limits": s.Keys().Tenant("t1"), "escrow": s.Keys().TenantEscrow("t1"),
		"total": s.Keys().TotalEscrow(), "want": s.Keys().TotalWant(), "granted": s.Keys().TotalGranted()}

	for name, sc := range scripts {
		t.Run(name, func(t *testing.T) {
			head, body := readScript(t, name)
			if head.keysLines != 1 {
				t.Fatalf("header has %d KEYS lines, want one: -- KEYS: <scope keys> | extra: <extra keys>", head.keysLines)
			}
			var declared, want []string
			for i, n := range sc.scope {
				declared = append(declared, n.name())
				want = append(want, prefix+"{"+scope+"}:"+n.name())
				if i > 0 && n <= sc.scope[i-1] {
					t.Errorf("lua.go: %s takes %s after %s, against the fixed order of scopeKeyTable", name, n.name(), sc.scope[i-1].name())
				}
			}
			if !slices.Equal(head.scope, declared) {
				t.Errorf("header's scope keys %v, lua.go's %v", head.scope, declared)
			}
			if !slices.Equal(head.extra, sc.extra) {
				t.Errorf("header's extra keys %v, lua.go's %v", head.extra, sc.extra)
			}
			for _, e := range sc.extra {
				key, ok := extraKeys[e]
				if !ok {
					t.Errorf("extra key %s: say in this test which key callEveryWrapper gives for it", e)
				}
				want = append(want, key)
			}

			keys, argv := h.keys[name], h.argv[name]
			if keys == nil {
				t.Fatalf("no wrapper of %s was called (callEveryWrapper)", name)
			}
			if len(keys) != len(want) {
				t.Errorf("wrapper sends %d KEYS %q, header names %d", len(keys), keys, len(want))
			}
			for i := range min(len(keys), len(want)) {
				if keys[i] != want[i] {
					t.Errorf("wrapper sends KEYS[%d] = %q, header names %q", i+1, keys[i], want[i])
				}
			}
			n := len(argv)
			if sc.guarded {
				n-- // the caller's deadline, which the header mentions apart
			}
			if n != head.argv && !(head.open && n >= head.argv-1) {
				t.Errorf("wrapper sends %d ARGV %v, header names %d", n, argv, head.argv)
			}

			if strings.Contains(strings.ReplaceAll(body, "scope_keys(KEYS)", ""), "KEYS[") {
				t.Errorf("body reads KEYS by position; read its key table (local k = scope_keys(KEYS))")
			}
			for _, m := range bodyKeyField.FindAllStringSubmatch(body, -1) {
				if !slices.Contains(head.scope, m[1]) && !slices.Contains(head.extra, m[1]) {
					t.Errorf("body reads k.%s, which is none of its KEYS", m[1])
				}
			}
		})
	}
}

// callEveryWrapper calls the wrapper of every script once (their answers are not the
// point), with a request id where one makes keys of its own.
func callEveryWrapper(ctx context.Context, s *Store, scope string) {
	now := time.UnixMilli(1_700_000_000_000)
	pod := warmpool.Pod{ID: "p1", ScopeID: scope}
	lock := &Lock{store: s, key: s.Keys().Lock("x"), token: "t", ttl: time.Second}
	req := IdemRequest{Scope: scope, ID: "r1", Fingerprint: AcquireFingerprint}
	_, _ = s.PodAcquire(ctx, scope, AcquireArgs{Now: now, Claim: "c"})
	_, _ = s.summaries(ctx, []string{scope})
	_, _ = s.PodRegister(ctx, scope, "1", pod, "c", now, now)
	_, _ = s.PodPurge(ctx, scope, "p1", "r", &now)
	_, _ = s.PodPlaceholder(ctx, scope, now, now, now)
	_, _ = s.tenantGrant(ctx, "t1", scope, "pods", 1, 500, 0, false, false)
	_, _ = s.tenantCredit(ctx, "t1", scope, "pods", 1, false)
	_ = s.totalGrant(ctx, "t1", scope, 1, 1, false, false)
	_ = s.totalCredit(ctx, "t1", scope, 1, false)
	_, _ = s.takeGranted(ctx)
	_, _ = s.quotaYield(ctx, scope, 1)
	_, _ = s.quotaIdle(ctx, scope, "1")
	_, _ = s.quotaApply(ctx, scope, "pods", 1)
	_, _ = s.quotaGovern(ctx, scope, [2]string{"1", "-"})
	_ = s.settle(ctx, scope, true)
	_, _ = s.PodAdopt(ctx, pod, now, false)
	_, _ = s.PodHealth(ctx, scope, "p1", false)
	_ = s.FenceRaise(ctx, scope, 3)
	_, _ = s.DeployExtend(ctx, scope, "1", now, now)
	_, _ = s.DeployAbort(ctx, scope, "1", "v", "r", false, now, now)
	_, _ = s.FollowerWait(ctx, scope, "1", "1|c", "c", now)
	_ = s.FollowerLeave(ctx, scope, "1|c", "c", now)
	_, _, _ = s.ClaimRelease(ctx, scope, "c", now)
	_, _ = s.HoldTouch(ctx, scope, "h", "p1", now, []byte("sealed"))
	_, _ = s.HoldRelease(ctx, scope, "h", "p1", now)
	_, _ = s.IdemClaim(ctx, req, "t", time.Minute)
	_, _ = s.IdemAnswer(ctx, scope, req.ID, "t", []byte("{}"), time.Minute)
	_, _ = s.IdemRelease(ctx, scope, req.ID, "t")
	_, _ = s.Obtain(ctx, s.Keys().Lock("x"), time.Second)
	_, _ = lock.extend(ctx)
	_ = lock.Release(ctx)
	_, _ = s.SessionRoute(ctx, scope, RouteArgs{Now: now, Session: "s1", RequestID: req.ID, IdemTTL: time.Minute, Waiter: "w"})
	_, _ = s.SessionTouch(ctx, scope, "s1", now)
	_, _ = s.SessionDeadline(ctx, scope, "s1", now, time.Minute, true)
	_, _ = s.SessionEnd(ctx, scope, "s1", now)
	_, _, _ = s.SessionEvict(ctx, scope, now, 10)
	_, _ = s.SessionGet(ctx, scope, "s1", now)
	_, _ = s.SessionConfig(ctx, scope, "s1", "p1", now)
	_ = s.WaiterLeave(ctx, scope, "w", now)
	_ = s.ScopePublish(ctx, ScopeRecord{ScopeID: scope, Config: warmpool.DefaultScopeConfig(), Version: 1, DeployVer: "v1"})
	_, _ = s.ScopeRepair(ctx, scope, now, now, true)
	_, _ = s.ScopeDelete(ctx, scope, 1, now)
	_, _ = s.ScopeForget(ctx, scope)
	_, _, _ = s.ScopeDue(ctx, scope, now)
	_, _ = s.PoolTarget(ctx, scope, now)
	_, _ = s.AgentReport(ctx, AgentReport{Scope: scope, Pod: "p1", Sessions: []string{"s1"}, Now: now})
	_, _ = s.ReportCap(ctx, scope, "p1")
}

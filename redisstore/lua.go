// Package redisstore is warmpool's state store in Redis: it loads the Lua scripts of
// package lua (every pool and session mutation is one atomic script) and runs them
// with the key schema (keys.go, with scopeKeyTable, the one table of a scope's keys
// in the fixed order in which a script takes them). Its files go by what they do:
// lua.go declares each script and the keys it takes, includes.go prepends to each the
// helpers of lua/lib it declares it uses, store.go runs a script and maps its
// failures (the runner), protocol.go is the call protocol around the runner (KEYS,
// the caller's deadline, due notes, the epoch check), reply.go reads a script's answer
// with every field type-checked, scopes.go, pods.go, deploys.go and sessions.go wrap
// the scripts of each kind of state (each wrapper named after its script), locks.go
// is the lease type, wake.go the pub/sub that wakes waiters and snapshot.go the
// read-only views.
package redisstore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool/lua"
)

// script is one embedded script with the name of its file, for error messages.
type script struct {
	name string
	// metric is the name without ".lua", the script's label in metrics.
	metric string
	// guarded scripts change state on a caller's behalf and take its deadline.
	guarded bool
	// due scripts note the sweep work they leave (note_due in lib/due.lua, which they
	// and only they get): they take the scope's config and due keys, and may answer
	// {"DUE", due, answer}.
	due bool
	// scope are the scope's keys the script takes, in the fixed order (keys.go), and
	// extra the names of the keys its wrapper gives after them: together, its KEYS.
	scope []scopeKey
	extra []string
	// namesLen is the length of the names of scope together: keys sizes the one
	// string it cuts them from by it.
	namesLen int
	// sha and src are the script's hash and source boxed once, the EVALSHA and EVAL
	// arguments of every call (command).
	sha, src any
	*redis.Script
}

// The scripts, one per file, each with the scope's keys it takes (by name, in the
// fixed order of keys.go) and the names of the extra keys its wrapper gives after
// them; see each file's header for its KEYS, ARGV, result and the includes it uses.
// Guarded scripts refuse a call run after its caller's deadline (lib/guard.lua); the
// others only give back, complete or read what a caller holds (a claim, a room entry,
// a lock, an idempotency mark) or raise a counter, which is as right late as on time.
var (
	podAcquire = load("pod_acquire.lua", guarded|notes,
		"epoch config pods podver podinfo slots idle deploying followers claims claimpod fence waiters queue wake dstats due backoff served demand sconf free freeprev warm warmprev busy surplus podclaims rooms open")
	podRegister = load("pod_register.lua", guarded|notes,
		"epoch config pods podver podinfo slots idle deploying followers claims claimpod waiters queue wake dstats due backoff served demand free freeprev warm warmprev busy surplus podclaims rooms open")
	podPurge = load("pod_purge.lua", guarded|notes,
		"epoch config pods podver podinfo slots idle claimpod sessions sexp health due agents served fixed sconf free freeprev warm warmprev busy surplus podsess podclaims", "gone")
	podPlaceholder = load("pod_placeholder.lua", guarded|notes,
		"epoch config pods podver slots idle deploying followers claims claimpod fence waiters queue wake dstats due backoff served demand sconf free freeprev warm warmprev busy surplus podclaims rooms open")
	podAdopt = load("pod_adopt.lua", guarded|notes,
		"config pods podver podinfo slots idle deploying claims claimpod due free freeprev warm warmprev busy surplus podclaims", "gone")
	podHealth     = load("pod_health.lua", guarded, "pods health")
	fenceRaise    = load("fence_raise.lua", unguarded, "fence")
	deployExtend  = load("deploy_extend.lua", guarded, "deploying")
	deployAbort   = load("deploy_abort.lua", unguarded|notes, "config deploying followers claims claimpod wake dstats due backoff podclaims rooms open")
	followerWait  = load("follower_wait.lua", unguarded, "config podinfo deploying followers claimpod rooms open")
	followerLeave = load("follower_leave.lua", unguarded|notes,
		"config pods podver slots idle deploying followers claims claimpod waiters queue wake due served demand sconf free freeprev warm warmprev busy surplus podclaims rooms open")
	claimRelease = load("claim_release.lua", unguarded|notes,
		"config pods podver slots idle claims claimpod waiters queue wake due served demand sconf free freeprev warm warmprev busy surplus podclaims")
	holdTouch   = load("hold_touch.lua", guarded, "epoch config claims claimpod sconf")
	holdRelease = load("hold_release.lua", unguarded|notes,
		"epoch config pods podver slots idle claims claimpod waiters queue wake due served demand sconf free freeprev warm warmprev busy surplus podclaims")
	idemClaim    = load("idem_claim.lua", guarded, "", "idem_mark", "route_answer")
	idemAnswer   = load("idem_answer.lua", unguarded, "", "idem_mark")
	idemRelease  = load("idem_release.lua", unguarded, "", "idem_mark")
	lockObtain   = load("lock_obtain.lua", guarded, "", "lock")
	lockExtend   = load("lock_extend.lua", guarded, "", "lock")
	lockRelease  = load("lock_release.lua", unguarded, "", "lock")
	sessionRoute = load("session_route.lua", guarded|notes,
		"epoch config pods podver podinfo slots idle claims claimpod sessions sexp waiters queue qseq wake due served demand fixed sconf free freeprev warm warmprev busy surplus podsess podclaims",
		"route_answer", "idem_mark")
	sessionTouch = load("session_touch.lua", guarded|notes,
		"epoch config pods podver slots idle claims claimpod sessions sexp waiters queue wake due served demand fixed sconf free freeprev warm warmprev busy surplus podsess podclaims")
	sessionDeadline = load("session_deadline.lua", guarded|notes,
		"epoch config pods podver slots idle claims claimpod sessions sexp waiters queue wake due served demand fixed sconf free freeprev warm warmprev busy surplus podsess podclaims")
	sessionEnd = load("session_end.lua", guarded|notes,
		"epoch config pods podver slots idle claims claimpod sessions sexp waiters queue wake due served demand fixed sconf free freeprev warm warmprev busy surplus podsess podclaims")
	sessionEvict = load("session_evict.lua", guarded|notes,
		"epoch config pods podver slots idle claims claimpod sessions sexp waiters queue wake due served demand fixed sconf free freeprev warm warmprev busy surplus podsess podclaims")
	sessionGet  = load("session_get.lua", unguarded, "config podinfo sessions sexp")
	sessionConf = load("session_config.lua", unguarded, "podinfo claims claimpod sessions sexp sconf")
	waiterLeave = load("waiter_leave.lua", unguarded|notes,
		"config pods podver slots idle claims claimpod waiters queue wake due served demand sconf free freeprev warm warmprev busy surplus podclaims")
	scopePublish = load("scope_publish.lua", guarded|notes, "epoch config pods podver slots idle deploying due backoff free freeprev warm warmprev busy surplus rooms open")
	scopeRepair  = load("scope_repair.lua", guarded|notes,
		"epoch config pods podver slots idle deploying followers claims claimpod sessions sexp waiters queue wake dstats due served demand sconf free freeprev warm warmprev busy surplus podsess podclaims rooms open")
	scopeDelete = load("scope_delete.lua", guarded|notes,
		"epoch config pods podver deploying followers claims claimpod waiters queue wake dstats due free freeprev warm warmprev busy surplus podclaims rooms open")
	scopeForget = load("scope_forget.lua", guarded,
		"epoch config pods podver podinfo slots idle deploying followers claims claimpod sessions sexp waiters queue qseq health dstats due deploylog agents backoff served demand fixed sconf free freeprev warm warmprev busy surplus podsess podclaims rooms open")
	agentReport = load("agent_report.lua", guarded|notes,
		"epoch config pods podver slots idle claims claimpod sessions sexp waiters queue wake due agents served demand fixed sconf free freeprev warm warmprev busy surplus podsess podclaims")
	reportCap  = load("report_cap.lua", unguarded, "epoch config slots")
	poolTarget = load("pool_target.lua", unguarded, "config dstats demand")
	scopeDue   = load("scope_due.lua", unguarded, "config pods idle deploying followers claims sexp waiters dstats due backoff demand warm warmprev surplus")
	// The tenants' quotas (quota.go): the escrow on the tenant's slot, the allowance
	// on the scope's.
	tenantGrant  = load("tenant_grant.lua", guarded, "", "limits", "escrow")
	tenantCredit = load("tenant_credit.lua", unguarded, "", "escrow")
	quotaApply   = load("quota_apply.lua", unguarded, "config")
	quotaTrim    = load("quota_trim.lua", unguarded, "config pods deploying sessions")
	quotaGovern  = load("quota_govern.lua", unguarded, "config")
	quotaYield   = load("quota_yield.lua", unguarded|notes, "config pods podver slots idle due free freeprev warm warmprev busy surplus")
	quotaIdle    = load("quota_idle.lua", unguarded|notes, "config pods podver slots idle dstats due demand free freeprev warm warmprev busy surplus")
	// The total cap's escrow (total.go), on its own slot.
	totalGrant  = load("total_grant.lua", guarded, "", "total", "want", "granted")
	totalCredit = load("total_credit.lua", unguarded, "", "total")
	totalTaken  = load("total_taken.lua", unguarded, "", "granted")
)

// An option of a script (load).
type option uint8

const (
	// unguarded: no option.
	unguarded option = 0
	// guarded: load prepends the deadline guard.
	guarded option = 1 << iota
	// notes: the script notes the sweep work it leaves (script.due): lib/due.lua is
	// among the includes it uses (itself or through another include), as it is
	// among no other script's.
	notes
)

// Scripts maps each script file name to its script, so tests can check that every
// file is loaded, that each one compiles on a real server, and recognise a script's
// calls by its hash.
var Scripts = map[string]*redis.Script{}

// Sources maps each script file name to the source Redis runs: the names of its KEYS,
// scope_keys, the includes it uses, the guard and the due notes assembled around the
// file, as Scripts hashes it.
var Sources = map[string]string{}

// Guarded lists the scripts that take their caller's deadline as an extra last ARGV
// and refuse with {"DEADLINE"} when run after it.
var Guarded = map[string]bool{}

// scripts maps each script file name to its script.
var scripts = map[string]*script{}

// load reads and compiles the script of file name, which takes the scope's keys named
// in scope (space-separated) and then the extra keys named.
func load(name string, opts option, scope string, extra ...string) *script {
	s := &script{name: name, metric: strings.TrimSuffix(name, ".lua"), guarded: opts&guarded != 0, due: opts&notes != 0, extra: extra}
	for _, f := range strings.Fields(scope) {
		n, ok := scopeKeyNamed(f)
		if !ok {
			panic(fmt.Sprintf("lua: %s takes %q, which is no key of a scope", name, f))
		}
		s.scope = append(s.scope, n)
		s.namesLen += len(f)
	}
	if s.due && (s.position(keyConfig) == 0 || s.position(keyDue) == 0) {
		panic(fmt.Sprintf("lua: %s notes due work but does not take the config and due keys", name))
	}
	if s.guarded {
		Guarded[name] = true
	}
	s.compile()
	scripts[name] = s
	return s
}

// position is where the scope's key n is in the script's KEYS (from 1), 0 when the
// script does not take it.
func (s *script) position(n scopeKey) int {
	return slices.Index(s.scope, n) + 1
}

// compile builds the script's source: the names of its KEYS (KEY_NAMES, which
// scope_keys in lib/keys.lua gives its keys by), scope_keys, the includes it uses (its
// header's "-- uses:" line, with theirs), then the guard and the body, wrapped for the
// due notes when the script takes them.
func (s *script) compile() {
	names := make([]string, 0, len(s.scope)+len(s.extra))
	for _, n := range s.scope {
		names = append(names, "'"+n.name()+"'")
	}
	for _, e := range s.extra {
		names = append(names, "'"+e+"'")
	}
	body := mustRead(s.name)
	uses, err := resolveUses(declaredUses(body))
	if err != nil {
		panic(fmt.Sprintf("lua: %s %v", s.name, err))
	}
	if notes := slices.Contains(uses, dueInclude); notes != s.due {
		panic(fmt.Sprintf("lua: %s gets the includes %v: it must be marked notes in lua.go if and only if lib/%s.lua is one of them", s.name, uses, dueInclude))
	}
	src := "local KEY_NAMES = {" + strings.Join(names, ", ") + "}\n" + keysLib + "\n"
	for _, u := range uses {
		src += includes[u].src + "\n"
	}
	if s.guarded {
		body = guard + "\n" + body
	}
	if s.due {
		src += "local function main()\n" + body + "end\nreturn due_reply(main())\n"
	} else {
		src += body
	}
	s.Script = redis.NewScript(src)
	s.sha, s.src = s.Hash(), src
	Scripts[s.name] = s.Script
	Sources[s.name] = src
}

func mustRead(name string) string {
	b, err := lua.Files.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(b)) + "\n"
}

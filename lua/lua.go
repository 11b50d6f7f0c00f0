// Package lua holds the Redis Lua scripts that make every pool and session mutation
// atomic, the key schema (keys.go) and the Store that runs them. Its files go by what
// they store: store.go runs a script and maps its failures, reply.go reads a script's
// answer with every field type-checked, scopes.go, pods.go, deploys.go and sessions.go
// wrap the scripts of each kind of state (each wrapper named after its script),
// locks.go is the lease type, wake.go the pub/sub that wakes waiters and snapshot.go
// the read-only views.
package lua

import (
	"embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var files embed.FS

// lib holds helper functions prepended to every script: Redis scripts cannot call one
// another, and sharing the text keeps one definition of each rule.
var lib = mustRead("_lib.lua")

// guard is prepended to the guarded scripts, after lib: it refuses a call that Redis
// runs after its caller's deadline, which Store.call appends to ARGV.
var guard = mustRead("_guard.lua")

// script is one embedded script with the name of its file, for error messages.
type script struct {
	name string
	// metric is the name without ".lua", the script's label in metrics.
	metric string
	// guarded scripts change state on a caller's behalf and take its deadline.
	guarded bool
	*redis.Script
}

// The scripts, one per file; see each file's header for its KEYS, ARGV and result.
// Guarded scripts refuse a call run after its caller's deadline (_guard.lua); the
// others only give back or read what a caller holds (a claim, a room entry, a lock)
// or raise a counter, which is as right late as on time.
var (
	podAcquire     = load("pod_acquire.lua", guarded)
	podRegister    = load("pod_register.lua", guarded)
	podPurge       = load("pod_purge.lua", guarded)
	podPlaceholder = load("pod_placeholder.lua", guarded)
	podAdopt       = load("pod_adopt.lua", guarded)
	podHealth      = load("pod_health.lua", guarded)
	fenceRaise     = load("fence_raise.lua", unguarded)
	deployExtend   = load("deploy_extend.lua", guarded)
	deployAbort    = load("deploy_abort.lua", unguarded)
	followerWait   = load("follower_wait.lua", unguarded)
	followerLeave  = load("follower_leave.lua", unguarded)
	claimRelease   = load("claim_release.lua", unguarded)
	holdTouch      = load("hold_touch.lua", guarded)
	holdRelease    = load("hold_release.lua", unguarded)
	lockObtain     = load("lock_obtain.lua", guarded)
	lockExtend     = load("lock_extend.lua", guarded)
	lockRelease    = load("lock_release.lua", unguarded)
	sessionRoute   = load("session_route.lua", guarded)
	sessionTouch   = load("session_touch.lua", guarded)
	sessionEnd     = load("session_end.lua", guarded)
	sessionEvict   = load("session_evict.lua", guarded)
	sessionGet     = load("session_get.lua", unguarded)
	waiterLeave    = load("waiter_leave.lua", unguarded)
	scopePublish   = load("scope_publish.lua", guarded)
	scopeRepair    = load("scope_repair.lua", guarded)
)

// Whether load prepends the deadline guard.
const (
	guarded   = true
	unguarded = false
)

// Scripts maps each script file name to its script, so tests can check that every
// file is loaded, that each one compiles on a real server, and recognise a script's
// calls by its hash.
var Scripts = map[string]*redis.Script{}

// Guarded lists the scripts that take their caller's deadline as an extra last ARGV
// and refuse with {"DEADLINE"} when run after it.
var Guarded = map[string]bool{}

func load(name string, guarded bool) *script {
	src := lib + "\n"
	if guarded {
		src += guard + "\n"
		Guarded[name] = true
	}
	s := &script{name: name, metric: strings.TrimSuffix(name, ".lua"), guarded: guarded, Script: redis.NewScript(src + mustRead(name))}
	Scripts[name] = s.Script
	return s
}

func mustRead(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(b)) + "\n"
}

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
	// due scripts take the scope's config and due keys as their last two KEYS and
	// note the sweep work they leave (see note_due in _lib.lua).
	due bool
	*redis.Script
}

// The scripts, one per file; see each file's header for its KEYS, ARGV and result.
// Guarded scripts refuse a call run after its caller's deadline (_guard.lua); the
// others only give back, complete or read what a caller holds (a claim, a room entry,
// a lock, an idempotency mark) or raise a counter, which is as right late as on time.
var (
	podAcquire     = notes(load("pod_acquire.lua", guarded))
	podRegister    = notes(load("pod_register.lua", guarded))
	podPurge       = notes(load("pod_purge.lua", guarded))
	podPlaceholder = notes(load("pod_placeholder.lua", guarded))
	podAdopt       = notes(load("pod_adopt.lua", guarded))
	podHealth      = load("pod_health.lua", guarded)
	fenceRaise     = load("fence_raise.lua", unguarded)
	deployExtend   = load("deploy_extend.lua", guarded)
	deployAbort    = notes(load("deploy_abort.lua", unguarded))
	followerWait   = load("follower_wait.lua", unguarded)
	followerLeave  = notes(load("follower_leave.lua", unguarded))
	claimRelease   = notes(load("claim_release.lua", unguarded))
	holdTouch      = notes(load("hold_touch.lua", guarded))
	idemClaim      = load("idem_claim.lua", guarded)
	idemAnswer     = load("idem_answer.lua", unguarded)
	idemRelease    = load("idem_release.lua", unguarded)
	holdRelease    = notes(load("hold_release.lua", unguarded))
	lockObtain     = load("lock_obtain.lua", guarded)
	lockExtend     = load("lock_extend.lua", guarded)
	lockRelease    = load("lock_release.lua", unguarded)
	sessionRoute   = notes(load("session_route.lua", guarded))
	sessionTouch   = notes(load("session_touch.lua", guarded))
	sessionEnd     = notes(load("session_end.lua", guarded))
	sessionEvict   = notes(load("session_evict.lua", guarded))
	sessionGet     = load("session_get.lua", unguarded)
	waiterLeave    = notes(load("waiter_leave.lua", unguarded))
	scopePublish   = notes(load("scope_publish.lua", guarded))
	scopeRepair    = notes(load("scope_repair.lua", guarded))
	scopeDelete    = notes(load("scope_delete.lua", guarded))
	scopeForget    = load("scope_forget.lua", guarded)
	scopeDue       = load("scope_due.lua", unguarded)
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

// Sources maps each script file name to the source Redis runs: the shared helpers,
// the guard and the due notes assembled around the file, as Scripts hashes it.
var Sources = map[string]string{}

// Guarded lists the scripts that take their caller's deadline as an extra last ARGV
// and refuse with {"DEADLINE"} when run after it.
var Guarded = map[string]bool{}

func load(name string, guarded bool) *script {
	s := &script{name: name, metric: strings.TrimSuffix(name, ".lua"), guarded: guarded}
	if guarded {
		Guarded[name] = true
	}
	s.compile()
	return s
}

// notes marks a script that notes the sweep work it leaves: it takes the due keys and
// its body runs as a function whose answer due_reply passes on.
func notes(s *script) *script {
	s.due = true
	s.compile()
	return s
}

// compile builds the script's source: the shared helpers, then the guard and the body,
// wrapped for the due notes when the script takes them.
func (s *script) compile() {
	src := lib + "\n"
	body := mustRead(s.name)
	if s.guarded {
		body = guard + "\n" + body
	}
	if s.due {
		src += "due.key = table.remove(KEYS)\ndue.config = table.remove(KEYS)\nlocal function main()\n" + body + "end\nreturn due_reply(main())\n"
	} else {
		src += body
	}
	s.Script = redis.NewScript(src)
	Scripts[s.name] = s.Script
	Sources[s.name] = src
}

func mustRead(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(b)) + "\n"
}

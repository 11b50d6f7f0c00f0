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

// script is one embedded script with the name of its file, for error messages.
type script struct {
	name string
	*redis.Script
}

// The scripts, one per file; see each file's header for its KEYS, ARGV and result.
var (
	podAcquire     = load("pod_acquire.lua")
	podRegister    = load("pod_register.lua")
	podPurge       = load("pod_purge.lua")
	podPlaceholder = load("pod_placeholder.lua")
	podAdopt       = load("pod_adopt.lua")
	podHealth      = load("pod_health.lua")
	fenceRaise     = load("fence_raise.lua")
	deployExtend   = load("deploy_extend.lua")
	deployAbort    = load("deploy_abort.lua")
	followerWait   = load("follower_wait.lua")
	followerLeave  = load("follower_leave.lua")
	claimRelease   = load("claim_release.lua")
	holdTouch      = load("hold_touch.lua")
	holdRelease    = load("hold_release.lua")
	lockObtain     = load("lock_obtain.lua")
	lockExtend     = load("lock_extend.lua")
	lockRelease    = load("lock_release.lua")
	sessionRoute   = load("session_route.lua")
	sessionTouch   = load("session_touch.lua")
	sessionEnd     = load("session_end.lua")
	sessionEvict   = load("session_evict.lua")
	sessionGet     = load("session_get.lua")
	waiterLeave    = load("waiter_leave.lua")
	scopePublish   = load("scope_publish.lua")
	scopeRepair    = load("scope_repair.lua")
)

// Scripts maps each script file name to its script, so tests can check that every
// file is loaded, that each one compiles on a real server, and recognise a script's
// calls by its hash.
var Scripts = map[string]*redis.Script{}

func load(name string) *script {
	s := &script{name: name, Script: redis.NewScript(lib + "\n" + mustRead(name))}
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

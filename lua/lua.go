// Package lua holds the Redis Lua scripts that make every pool and session mutation
// atomic, the key schema (keys.go) and typed wrappers that run the scripts (store.go).
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

// The scripts, one per file; see each file's header for its KEYS, ARGV and result.
var (
	PodAcquire     = load("pod_acquire.lua")
	PodRegister    = load("pod_register.lua")
	PodRelease     = load("pod_release.lua")
	PodPurge       = load("pod_purge.lua")
	PodPlaceholder = load("pod_placeholder.lua")
	DeployExtend   = load("deploy_extend.lua")
	DeployAbort    = load("deploy_abort.lua")
	FollowerWait   = load("follower_wait.lua")
	FollowerLeave  = load("follower_leave.lua")
	ClaimRelease   = load("claim_release.lua")
	LockObtain     = load("lock_obtain.lua")
	LockExtend     = load("lock_extend.lua")
	LockRelease    = load("lock_release.lua")
	SessionRoute   = load("session_route.lua")
	SessionTouch   = load("session_touch.lua")
	SessionEnd     = load("session_end.lua")
	SessionEvict   = load("session_evict.lua")
	SessionGet     = load("session_get.lua")
	WaiterGate     = load("waiter_gate.lua")
	WaiterLeave    = load("waiter_leave.lua")
	ScopePublish   = load("scope_publish.lua")
	ScopeRepair    = load("scope_repair.lua")
	PodAdopt       = load("pod_adopt.lua")
	PodHealth      = load("pod_health.lua")
	FenceRaise     = load("fence_raise.lua")
)

// Scripts maps each script file name to its script, so tests can check that every
// file is loaded and that each one compiles on a real server.
var Scripts = map[string]*redis.Script{}

func load(name string) *redis.Script {
	s := redis.NewScript(lib + "\n" + mustRead(name))
	Scripts[name] = s
	return s
}

func mustRead(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(b)) + "\n"
}

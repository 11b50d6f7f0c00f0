package lua

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// Keyspace builds every Redis key name; it is the only place that does. All keys of a
// scope carry the hash tag {scope_id} so that each script's keys share one cluster slot.
type Keyspace struct {
	prefix string
}

// DefaultPrefix is the key prefix when none is configured.
const DefaultPrefix = "wp:"

// NewKeyspace returns the keyspace under prefix (DefaultPrefix when empty).
func NewKeyspace(prefix string) Keyspace {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Keyspace{prefix: prefix}
}

// Prefix is the key prefix of the keyspace.
func (k Keyspace) Prefix() string { return k.prefix }

// Scopes is the global index of published scopes (a SET), kept outside scripts and
// repairable from the config store.
func (k Keyspace) Scopes() string { return k.prefix + "scopes" }

// Epoch is the global epoch key, written when the keyspace is bootstrapped; its absence
// means Redis lost its data.
func (k Keyspace) Epoch() string { return k.prefix + "epoch" }

// ReplicationID holds the replication id of the Redis server the keyspace was built
// on; another id means a failover (failover.go).
func (k Keyspace) ReplicationID() string { return k.prefix + "replid" }

// Summaries is the pool page's summary of every scope as one replica last read it
// (STRING, PX: the page's refresh interval), so that the other replicas reuse it
// instead of reading every scope again (Store.ShareSummaries).
func (k Keyspace) Summaries() string { return k.prefix + "ui:summaries" }

// The E2B front door's sandbox records (sandboxes.go), kept outside scripts under one
// hash tag of their own (no scope's: a scope's keys open with "{"), so that a MULTI
// writes them together on a Cluster too.

// SandboxRecords is the HASH of sandbox id -> its record (JSON: scope, start, metadata).
func (k Keyspace) SandboxRecords() string { return k.prefix + "e2b:{sandboxes}:records" }

// SandboxStarts is the ZSET of sandbox id -> when it started (ms): the list's order.
func (k Keyspace) SandboxStarts() string { return k.prefix + "e2b:{sandboxes}:started" }

// SandboxDeadlines is the ZSET of sandbox id -> the latest its session can end (ms),
// by which records are pruned.
func (k Keyspace) SandboxDeadlines() string { return k.prefix + "e2b:{sandboxes}:deadlines" }

// Lock is the key of a global lease lock (sweeper jobs, config sync).
func (k Keyspace) Lock(name string) string { return k.prefix + "lock:" + name }

// DueShards is the number of shards of the due index: every replica must agree on it,
// so it is a constant. Each shard is one ZSET (its own cluster slot) and one sweeper
// lease, so replicas share the sweep work shard by shard.
const DueShards = 16

// DueShard is the shard of the due index that holds a scope.
func DueShard(scope string) int {
	h := fnv.New32a()
	h.Write([]byte(scope))
	return int(h.Sum32() % DueShards)
}

// DueIndex is one shard of the due index (a ZSET: scope id -> when its next sweep work
// falls due, ms), kept outside scripts (its slot is not a scope's): scripts note a
// scope's due time in the scope's own due key, Store.call moves the scope in its shard
// after the script, and the sweeper's full pass re-indexes every scope.
func (k Keyspace) DueIndex(shard int) string {
	return k.prefix + "due:{" + strconv.Itoa(shard) + "}"
}

// ProbeWindow is the end of the last probe window of a shard's watch (STRING, ms): the
// next run probes the pods whose probe times fall after it. It shares the shard's hash
// tag with DueIndex and Failing.
func (k Keyspace) ProbeWindow(shard int) string {
	return k.prefix + "probed:{" + strconv.Itoa(shard) + "}"
}

// Failing is the set of a shard's pods whose last probe failed ("<scope> <pod>"):
// only their recoveries are written to Redis, so a healthy pod's probes write nothing.
func (k Keyspace) Failing(shard int) string {
	return k.prefix + "failing:{" + strconv.Itoa(shard) + "}"
}

// Reported is the shard's index of the pods whose agents report ("<scope> <pod>" ->
// until when their last reports keep them from being probed, ms), kept outside
// scripts like DueIndex: the watch skips those pods while their time is ahead.
func (k Keyspace) Reported(shard int) string {
	return k.prefix + "reported:{" + strconv.Itoa(shard) + "}"
}

// WakeChannel is the pub/sub channel that wakes the waiters of a scope.
func (k Keyspace) WakeChannel(scope string) string { return k.Scope(scope).Wake }

// A scopeKey is one of a scope's keys. The constants are the one fixed order in
// which a script takes a scope's keys: its KEYS are the scope's keys it needs, in
// this order, then the extra keys its wrapper gives (lua.go declares both for each
// script; the scripts' headers list them in that order, which a test checks).
type scopeKey int

// The scope's keys, in their fixed order.
const (
	keyEpoch scopeKey = iota
	keyConfig
	keyPods
	keyPodVer
	keyPodInfo
	keySlots
	keyIdle
	keyDeploying
	keyFollowers
	keyClaims
	keyClaimPod
	keyFence
	keySessions
	keySessExp
	keyWaiters
	keyQueue
	keyQSeq
	keyWake
	keyHealth
	keyDeployStats
	keyDue
	keyDeployLog
	keyAgents
	keyBackoff
	keyServed
	keyDemand
	keyFixed
	numScopeKeys
)

// scopeKeyNames name the scope's keys: each name is the last part of the key's name in
// Redis, the key's field in a script's key table (scope_keys in _lib.lua: k.pods) and
// how scripts' headers write it ({s}:pods).
var scopeKeyNames = [numScopeKeys]string{
	keyEpoch:       "epoch",
	keyConfig:      "config",
	keyPods:        "pods",
	keyPodVer:      "podver",
	keyPodInfo:     "podinfo",
	keySlots:       "slots",
	keyIdle:        "idle",
	keyDeploying:   "deploying",
	keyFollowers:   "followers",
	keyClaims:      "claims",
	keyClaimPod:    "claimpod",
	keyFence:       "fence",
	keySessions:    "sessions",
	keySessExp:     "sexp",
	keyWaiters:     "waiters",
	keyQueue:       "queue",
	keyQSeq:        "qseq",
	keyWake:        "wake",
	keyHealth:      "health",
	keyDeployStats: "dstats",
	keyDue:         "due",
	keyDeployLog:   "deploylog",
	keyAgents:      "agents",
	keyBackoff:     "backoff",
	keyServed:      "served",
	keyDemand:      "demand",
	keyFixed:       "fixed",
}

// scopeKeyNamesLen is the length of the scope's key names together: Scope cuts the
// keys from one string of numScopeKeys prefixes and these names.
var scopeKeyNamesLen = func() int {
	n := 0
	for _, name := range scopeKeyNames {
		n += len(name)
	}
	return n
}()

// Scope returns the keys of one scope. They are cut from one string built at once: a
// warm route builds them for its one script call, and a string per key would cost an
// allocation per key.
func (k Keyspace) Scope(id string) ScopeKeys {
	p := k.prefix + "{" + id + "}:"
	var b strings.Builder
	b.Grow(int(numScopeKeys)*len(p) + scopeKeyNamesLen)
	key := func(n scopeKey) string {
		start := b.Len()
		b.WriteString(p)
		b.WriteString(scopeKeyNames[n])
		return b.String()[start:]
	}
	return ScopeKeys{
		ID:          id,
		base:        p,
		Epoch:       key(keyEpoch),
		Config:      key(keyConfig),
		Pods:        key(keyPods),
		PodVer:      key(keyPodVer),
		PodInfo:     key(keyPodInfo),
		Slots:       key(keySlots),
		Idle:        key(keyIdle),
		Deploying:   key(keyDeploying),
		Followers:   key(keyFollowers),
		Claims:      key(keyClaims),
		ClaimPod:    key(keyClaimPod),
		Fence:       key(keyFence),
		Sessions:    key(keySessions),
		SessExp:     key(keySessExp),
		Waiters:     key(keyWaiters),
		Queue:       key(keyQueue),
		QSeq:        key(keyQSeq),
		Wake:        key(keyWake),
		Health:      key(keyHealth),
		DeployStats: key(keyDeployStats),
		Due:         key(keyDue),
		DeployLog:   key(keyDeployLog),
		Agents:      key(keyAgents),
		Backoff:     key(keyBackoff),
		Served:      key(keyServed),
		Demand:      key(keyDemand),
		Fixed:       key(keyFixed),
	}
}

// scopeBase are the keys of scope id for one script call alone: only ID and base are
// set, and the call cuts the script's keys from base (script.keys) instead of building
// every key of the scope (900 bytes) for the few it takes.
func (k Keyspace) scopeBase(id string) ScopeKeys {
	return ScopeKeys{ID: id, base: k.prefix + "{" + id + "}:"}
}

// key is the scope's key n.
func (s *ScopeKeys) key(n scopeKey) string {
	switch n {
	case keyEpoch:
		return s.Epoch
	case keyConfig:
		return s.Config
	case keyPods:
		return s.Pods
	case keyPodVer:
		return s.PodVer
	case keyPodInfo:
		return s.PodInfo
	case keySlots:
		return s.Slots
	case keyIdle:
		return s.Idle
	case keyDeploying:
		return s.Deploying
	case keyFollowers:
		return s.Followers
	case keyClaims:
		return s.Claims
	case keyClaimPod:
		return s.ClaimPod
	case keyFence:
		return s.Fence
	case keySessions:
		return s.Sessions
	case keySessExp:
		return s.SessExp
	case keyWaiters:
		return s.Waiters
	case keyQueue:
		return s.Queue
	case keyQSeq:
		return s.QSeq
	case keyWake:
		return s.Wake
	case keyHealth:
		return s.Health
	case keyDeployStats:
		return s.DeployStats
	case keyDue:
		return s.Due
	case keyDeployLog:
		return s.DeployLog
	case keyAgents:
		return s.Agents
	case keyBackoff:
		return s.Backoff
	case keyServed:
		return s.Served
	case keyDemand:
		return s.Demand
	case keyFixed:
		return s.Fixed
	}
	panic("lua: no scope key " + strconv.Itoa(int(n)))
}

// ScopeKeys are the keys of one scope; see each script's header for their types.
type ScopeKeys struct {
	ID   string
	base string

	Epoch     string // STRING scope epoch, no TTL
	Config    string // HASH   published config
	Pods      string // ZSET   pod id -> registered at (ms)
	PodVer    string // HASH   pod id -> deploy_ver
	PodInfo   string // HASH   pod id -> pod JSON
	Slots     string // HASH   pod id -> sessions + claims
	Idle      string // ZSET   pod id -> idle since (ms)
	Deploying string // ZSET   deploy member -> lease deadline (ms)
	Followers string // ZSET   "<deploy>|<claim>" -> deadline (ms)
	Claims    string // ZSET   claim id -> deadline (ms)
	ClaimPod  string // HASH   claim id -> pod id | "!reason"
	Fence     string // STRING fencing counter
	Sessions  string // HASH   session id -> pod id
	SessExp   string // ZSET   session id -> expiry (ms)
	Waiters   string // ZSET   waiter id -> deadline (ms), every live waiter
	Queue     string // ZSET   waiter id -> arrival number, the waiters without a slot yet
	QSeq      string // STRING arrival counter of the queue
	Wake      string // the pub/sub channel of the scope's wake-ups (not a key; its slot)
	Health    string // HASH   pod id -> consecutive failed probes
	// DeployStats: "est" -> rolling estimate of the deploy time (ms), "start:<deploy
	// member>" -> when that deploy in flight started (ms).
	DeployStats string // HASH
	Due         string // STRING when the scope's next sweep work falls due (ms)
	DeployLog   string // LIST   the latest finished deploys, newest first (DeployRecord JSON)
	// Agents: "<pod>" -> until when the pod's reports keep it from being probed
	// (ms, as the shard's Reported index has it), "<pod>|miss" -> the sessions bound
	// to the pod that its last report left out (space-separated; sessions_from_reports).
	Agents string // HASH
	// Backoff: the refill backoff after failed deploys of the current deploy_ver,
	// "failures", "until" (ms), "error" (the last failure's reason); no key, no backoff.
	Backoff string // HASH
	// Served: pod id -> the slots handed out on the pod over its life (its sessions
	// and holds), counted while pool.max_sessions_per_pod is set.
	Served string // HASH
	// Demand: the slot takes and frees of the scope, counted across replicas for the
	// demand policy's target (demand_note in _lib.lua): "t" (ms, when last decayed),
	// "in_fast", "in_slow", "out_fast", "out_slow" (exponentially decayed counts).
	Demand string // HASH
	// Fixed: the sessions whose expiry is fixed, a deadline that routes, touches and
	// agent reports do not move (E2B's sandbox timeout: session_route.lua with a fixed
	// TTL, session_deadline.lua); each is also in SessExp.
	Fixed string // SET
}

// Gone is the tombstone of a purged pod (STRING, reason, with a TTL of GoneTTL):
// reconcile does not adopt a pod while its tombstone lives, so a pod purged by one job
// and not yet deleted (or still in a lagging driver list) does not come back.
func (s ScopeKeys) Gone(pod string) string {
	return s.base + "gone:" + pod
}

// SessionLock is the lease lock under which one call at a time runs the slow path of
// a session's route (STRING holder token, PX lease).
func (s ScopeKeys) SessionLock(session string) string {
	return s.base + "slock:" + session
}

// IdemMark is a request id's mark (STRING "<fingerprint>\n<owner token>\n<answer>",
// the answer "" while the first request runs; PX): the route's slow path and the
// acquire run once per request id under it, and its answer is replayed.
func (s ScopeKeys) IdemMark(requestID string) string {
	return s.base + "idem:run:" + requestID
}

// RouteAnswer is where session_route.lua keeps the answer of a route with a request
// id for its replays (STRING "<fingerprint>\n<new flag>\n<pod id>\n<pod JSON>", PX).
func (s ScopeKeys) RouteAnswer(requestID string) string {
	return s.base + "idem:route:" + requestID
}

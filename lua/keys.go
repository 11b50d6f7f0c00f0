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

// WakeChannel is the pub/sub channel that wakes the waiters of a scope.
func (k Keyspace) WakeChannel(scope string) string { return k.Scope(scope).Wake }

// Scope returns the keys of one scope. They are cut from one string built at once:
// a warm route builds them for its one script call, and 23 strings cost 23
// allocations.
func (k Keyspace) Scope(id string) ScopeKeys {
	p := k.prefix + "{" + id + "}:"
	var b strings.Builder
	b.Grow(scopeKeyCount*len(p) + scopeKeySuffixes)
	key := func(suffix string) string {
		start := b.Len()
		b.WriteString(p)
		b.WriteString(suffix)
		return b.String()[start:]
	}
	return ScopeKeys{
		ID:          id,
		base:        p,
		Epoch:       key("epoch"),
		Config:      key("config"),
		Pods:        key("pods"),
		PodVer:      key("podver"),
		PodInfo:     key("podinfo"),
		Slots:       key("slots"),
		Idle:        key("idle"),
		Deploying:   key("deploying"),
		Followers:   key("followers"),
		Claims:      key("claims"),
		ClaimPod:    key("claimpod"),
		Fence:       key("fence"),
		Sessions:    key("sessions"),
		SessExp:     key("sexp"),
		Waiters:     key("waiters"),
		Queue:       key("queue"),
		QSeq:        key("qseq"),
		Wake:        key("wake"),
		Health:      key("health"),
		DeployStats: key("dstats"),
		Due:         key("due"),
		DeployLog:   key("deploylog"),
	}
}

// scopeKeyCount and scopeKeySuffixes size the string Scope cuts the keys from: the
// number of keys and the length of their suffixes together (a larger string than
// needed wastes a little; a smaller one costs another allocation).
const (
	scopeKeyCount    = 22
	scopeKeySuffixes = 130
)

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

package redisstore

//go:generate go test -run ^TestGeneratedKeys$ . -update

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

// Layout holds the layout of the scopes' keys the keyspace was built with
// (IndexLayout); an older one, or none beside a live epoch, means a release before the
// indexes wrote it, and the bootstrap builds them (server: the index pass).
func (k Keyspace) Layout() string { return k.prefix + "layout" }

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

// A tenant's keys (tenants.go) carry the tenant's own hash tag, {tenant}: a
// tenant's keys share one slot, which is a scope's slot only for the scope of the
// same id (a scope's keys open with "{", a tenant's with "tenant:").

// Tenant is the tenant's quotas (HASH, TenantLimits: pods, cpu_m, memory_b,
// sessions, idle_pods, weight, with -1 for no limit), written by every replica's
// config feed; no key, no quotas.
func (k Keyspace) Tenant(tenant string) string { return k.prefix + "tenant:{" + tenant + "}" }

// TenantScopes is the index of the scopes that name the tenant (SET of scope ids),
// kept outside scripts: ScopePublish adds a scope before its script runs, and a
// reader checks each member against its scope's published tenant, dropping those
// that name another (or none: forgotten).
func (k Keyspace) TenantScopes(tenant string) string {
	return k.prefix + "tenant:{" + tenant + "}:scopes"
}

// TenantEscrow is what the tenant's escrow granted its scopes (HASH, quota.go and
// lib/quota.lua): "pods", "cpu_m", "memory_b", "sessions" over all its scopes,
// "<dim>|<scope>" per scope, and "rate|<dim>", "rate_t|<dim>" the release rate of
// pods and of sessions that Retry-After is figured from. One key per tenant, on the
// tenant's slot, changed only by tenant_grant.lua and tenant_credit.lua.
func (k Keyspace) TenantEscrow(tenant string) string {
	return k.prefix + "tenant:{" + tenant + "}:escrow"
}

// The total cap's keys (total.go) carry a hash tag of their own, {total}, under a
// name no scope's or tenant's key has ("total:").

// TotalEscrow is what the escrow of --max-pods-total granted (HASH, total_grant.lua):
// "pods", "pods|<tenant>", "s|<scope>", "w|<tenant>" (weight), "want|<tenant>"
// (a rival's demand) and the release rate of pods.
func (k Keyspace) TotalEscrow() string { return k.prefix + "total:{total}" }

// TotalWant is the tenants refused by the total cap (ZSET tenant -> until when it
// counts as a rival, ms).
func (k Keyspace) TotalWant() string { return k.prefix + "total:{total}:want" }

// TotalGranted is the tenants the total granted pods since the tenants job last took
// them (SET), whose balance pass gives back what they do not use.
func (k Keyspace) TotalGranted() string { return k.prefix + "total:{total}:granted" }

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

// A scopeKey is one of a scope's keys: its place in scopeKeyTable.
type scopeKey int

// scopeKeyDef is one key of a scope: its ScopeKeys field, its name (the last part of
// its name in Redis, <prefix>{<scope>}:<name>, its field in a script's key table,
// k.<name>, and how a script's header names it), its Redis type and what it holds.
type scopeKeyDef struct {
	field, name, typ, holds string
}

// scopeKeyTable is the one table of a scope's keys, in their one fixed order: a
// script's KEYS are the scope's keys it takes, in this order, then the extra keys its
// wrapper gives (lua.go declares both for each script, its header names them, and
// header_test.go checks that the two agree). keys_gen.go (the scopeKey constants, the
// ScopeKeys fields, newScopeKeys and ScopeKeys.key) and the scope's rows of the key
// table in docs/architecture.md are generated from it by `go generate ./redisstore/`;
// TestGeneratedKeys fails while either is stale.
var scopeKeyTable = [...]scopeKeyDef{
	{"Epoch", "epoch", "STRING", "the scope's epoch, no TTL; missing = Redis lost its data (EPOCH_LOST)"},
	{"Config", "config", "HASH", "the published config (deploy_ver, version, tenant, cpu_m and memory_b (what one pod requests), the pool fields in ms); " +
		"deleted -> the version a deleted scope was deleted at; prewarm_ver, prewarm_until -> a rollout's " +
		"prewarm (the old deploy_ver, until when its pods take sessions, ms); q_pods, q_sess -> the scope's " +
		"allowance of its tenant's quotas, when governed (lib/quota.lua)"},
	{"Pods", "pods", "ZSET", "pod id -> registered at (ms)"},
	{"PodVer", "podver", "HASH", "pod id -> deploy_ver, or retired (a pod of a deleted scope, recycled, " +
		"or past max_sessions_per_pod) or draining: such a pod is never handed out again"},
	{"PodInfo", "podinfo", "HASH", "pod id -> pod JSON"},
	{"Slots", "slots", "HASH", "pod id -> sessions + live claims on the pod"},
	{"Idle", "idle", "ZSET", "pod id -> idle since (ms); a pod is idle only with 0 slots"},
	{"Deploying", "deploying", "ZSET", `deploy member ("<fence>" or "<fence>w") -> lease deadline (ms): ` +
		"the deploys in flight (placeholders)"},
	{"Followers", "followers", "ZSET", `"<deploy member>|<claim id>" -> deadline (ms): the rooms of the deploys in flight`},
	{"Claims", "claims", "ZSET", "claim id -> deadline (ms); holds and grants are claims"},
	{"ClaimPod", "claimpod", "HASH", "claim id -> pod id, or the note of a follower whose deploy ended " +
		`without a pod: "!reason" when it failed, "!lost:reason" when it was lost (lib/claimpod.lua)`},
	{"Fence", "fence", "STRING", "the fencing counter"},
	{"Sessions", "sessions", "HASH", "session id -> pod id"},
	{"SessExp", "sexp", "ZSET", "session id -> expiry (ms)"},
	{"Waiters", "waiters", "ZSET", "waiter id -> deadline (ms): every live waiter, served a slot or not"},
	{"Queue", "queue", "ZSET", "waiter id -> arrival number: the waiters still without a slot"},
	{"QSeq", "qseq", "STRING", "the arrival counter of the queue"},
	{"Wake", "wake", "channel", `the scope's wake-up messages (a waiter id, or "*"): a pub/sub channel, ` +
		"not a key, in KEYS for its cluster slot"},
	{"Health", "health", "HASH", "pod id -> consecutive failed probes"},
	{"DeployStats", "dstats", "HASH", `"est" -> the scope's deploy time estimate (ms); ` +
		`"start:<deploy member>" -> when that deploy in flight started (ms)`},
	{"Due", "due", "STRING", "when the scope's next sweep work falls due (ms)"},
	{"DeployLog", "deploylog", "LIST", "the latest finished deploys, newest first (DeployRecord JSON)"},
	{"Agents", "agents", "HASH", `"<pod>" -> until when the pod's reports spare it the probes (ms, as the ` +
		`shard's Reported index has it); "<pod>|miss" -> the sessions bound to it that its last report ` +
		"left out (space-separated)"},
	{"Backoff", "backoff", "HASH", "the refill backoff after failed deploys of the current deploy_ver: " +
		`"failures" (in a row), "until" (ms), "error" (the last reason); no key, no backoff`},
	{"Served", "served", "HASH", "pod id -> the slots handed out on the pod over its life (its sessions " +
		"and holds), counted while max_sessions_per_pod is set"},
	{"Demand", "demand", "HASH", `under warm_policy "demand", the slot takes and frees, counted across ` +
		`replicas: "t" (ms, when last decayed), "in_fast", "in_slow", "out_fast", "out_slow" ` +
		"(exponentially decayed counts; lib/demand.lua)"},
	{"Fixed", "fixed", "SET", "the sessions whose expiry is fixed: a deadline that routes, touches and " +
		"agent reports do not move (E2B's sandbox timeout: session_route.lua with a fixed TTL, " +
		"session_deadline.lua); each is also in sexp"},
	{"SessConf", "sconf", "HASH", "session id -> its session_config (SPEC §12.2), sealed (AES-GCM under a key derived from " +
		`the report secret), set when session_route.lua binds the session; "hold|<hold id>" -> a hold's, set when ` +
		"hold_touch.lua makes the hold: each goes with its session or hold (lib/slots.lua, pod_purge.lua, " +
		"scope_repair.lua, scope_forget.lua)"},
	// The indexes of lib/index.lua: derived from the keys above, kept exact by every
	// script that changes what they index, so that a choice reads O(log P) of them.
	{"Free", "free", "ZSET", "pod id -> registered at (ms): the pods of the current deploy_ver with a free " +
		"slot (slots < pod_concurrency) that are not surplus; session_route.lua's first fit, in the order of pods"},
	{"FreePrev", "freeprev", "ZSET", "pod id -> registered at (ms): the pods of prewarm_ver (a rollout's " +
		"prewarm) with a free slot"},
	{"Warm", "warm", "ZSET", "pod id -> idle since (ms): the idle pods of the current deploy_ver, surplus ones " +
		"included (they are its first entries)"},
	{"WarmPrev", "warmprev", "ZSET", "pod id -> idle since (ms): the idle pods of prewarm_ver"},
	{"Busy", "busy", "ZSET", "pod id -> registered at (ms): the pods of the current deploy_ver that are not idle"},
	{"Surplus", "surplus", "ZSET", "pod id -> 0 (idle) or 1 (busy): the current deploy_ver's pods beyond " +
		"max_pods, the first entries of warm, then the last of busy (lib/surplus.lua)"},
	{"PodSess", "podsess", "ZSET", `"<pod> <session>" -> 0: every binding of sessions, by pod (a pod's ` +
		"sessions are one lex range)"},
	{"PodClaims", "podclaims", "ZSET", `"<pod> <claim>" -> 0: every claimpod entry that names a pod, by pod`},
	{"Rooms", "rooms", "ZSET", `"<deploy member>|<claim id>" -> 0: the members of followers, by deploy (a ` +
		"room's members are one lex range, its size a ZLEXCOUNT)"},
	{"Open", "open", "ZSET", "deploy member -> its fence: the deploys in flight whose room takes another " +
		"follower (fewer than pod_concurrency - 1 followers, pod_concurrency for a warm-pool deploy, within " +
		"max_sessions_per_pod)"},
}

// numScopeKeys is the number of a scope's keys.
const numScopeKeys = scopeKey(len(scopeKeyTable))

// scopeKeyNamesLen is the length of the scope's key names together: Scope cuts the
// keys from one string of numScopeKeys prefixes and these names.
var scopeKeyNamesLen = func() int {
	n := 0
	for _, d := range scopeKeyTable {
		n += len(d.name)
	}
	return n
}()

// scopeKeyNamed is the scope's key called name; false when no key of a scope is.
func scopeKeyNamed(name string) (scopeKey, bool) {
	for n, d := range scopeKeyTable {
		if d.name == name {
			return scopeKey(n), true
		}
	}
	return 0, false
}

// name is the key's name (scopeKeyTable).
func (n scopeKey) name() string { return scopeKeyTable[n].name }

// Scope returns the keys of one scope. They are cut from one string built at once: a
// warm route builds them for its one script call, and a string per key would cost an
// allocation per key.
func (k Keyspace) Scope(id string) ScopeKeys {
	p := k.prefix + "{" + id + "}:"
	var b strings.Builder
	b.Grow(int(numScopeKeys)*len(p) + scopeKeyNamesLen)
	var keys [numScopeKeys]string
	for n := range numScopeKeys {
		start := b.Len()
		b.WriteString(p)
		b.WriteString(n.name())
		keys[n] = b.String()[start:]
	}
	return newScopeKeys(id, p, &keys)
}

// scopeBase are the keys of scope id for one script call alone: only ID and base are
// set, and the call cuts the script's keys from base (script.keys) instead of building
// every key of the scope (900 bytes) for the few it takes.
func (k Keyspace) scopeBase(id string) ScopeKeys {
	return ScopeKeys{ID: id, base: k.prefix + "{" + id + "}:"}
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

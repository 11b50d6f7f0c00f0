// Package warmpool holds the domain of the warm-pod manager: scope configs, pods,
// errors and the small interfaces (pod drivers, config store, pool, clock) that the
// technology packages implement and cmd wires together.
package warmpool

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Pod is one agent pod of one scope, as warmpool records it and as drivers report it.
type Pod struct {
	ID        string `json:"pod_id"`
	ScopeID   string `json:"scope_id"`
	DeployVer string `json:"deploy_ver"`
	// Fence is the fencing number of the deploy that created the pod.
	Fence     int64  `json:"fence"`
	Namespace string `json:"namespace,omitempty"`
	SSEURL    string `json:"pod_sse_url"`
	HealthURL string `json:"health_url"`
	// CreatedAt is when the driver created the pod (unix ms).
	CreatedAt int64 `json:"created_at"`

	// Driver state, filled by List; not stored in Redis.
	Ready bool `json:"-"`
	// Dead is the normalised reason the pod is gone or will never serve again; empty
	// while it lives.
	Dead string `json:"-"`
}

// DeployRequest asks a driver for one pod of a scope.
type DeployRequest struct {
	ScopeID   string
	DeployVer string
	// Fence is the fencing number of the deploy lease; the pod carries it and its name
	// derives from it, so a repeated create of the same deploy fails with AlreadyExists.
	Fence int64
	Spec  DeploySpec
	// OnPhase, when set, is told each phase the deploy reaches (the Phase* constants
	// the driver has, in order), as it reaches it: for metrics and the deploy's log
	// line. It must not block.
	OnPhase func(phase string)
	// Report, when set, is where the pod reports (SPEC §11.2): the driver gives the
	// agent container AgentEnv(pod id).
	Report *ReportTarget
	// ReportIntervalS is the scope's agent.report_interval_s, which AgentEnv tells the
	// agent (0: unknown, the default is told).
	ReportIntervalS int
}

// Deploy phases. PhaseLeaseWait is the time the caller spent getting the deploy lease
// before the driver was called; drivers report the others they have, through
// DeployRequest.OnPhase.
const (
	PhaseLeaseWait = "lease_wait"
	// PhaseCreate: the pod was created (API object, process or record).
	PhaseCreate = "create"
	// PhaseScheduled: the pod was placed on a node.
	PhaseScheduled = "scheduled"
	// PhaseStarted: the pod's container or process runs.
	PhaseStarted = "started"
	// PhaseReady: the pod is ready to serve.
	PhaseReady = "ready"
)

// Phase reports phase through r.OnPhase when it is set.
func (r DeployRequest) Phase(phase string) {
	if r.OnPhase != nil {
		r.OnPhase(phase)
	}
}

// PodDriver creates, lists, probes and deletes pods. Implementations: k8s.Kubernetes,
// local.Driver (local processes, driver/local) and fake.Driver (in memory, for tests,
// driver/fake); the suite in driver/drivertest checks each of them against this
// contract.
type PodDriver interface {
	// Deploy creates the pod and waits until it is ready, at most
	// Spec.ReadyTimeoutS. req.Spec is normalized (ScopeConfig.Normalize): drivers use
	// it as it is and fill no defaults. A pod that cannot come up yields a DEPLOY_FAILED
	// *Error whose message says why; a cancelled ctx yields ctx.Err(). Whatever Deploy
	// created is deleted again when it fails.
	Deploy(ctx context.Context, req DeployRequest) (Pod, error)
	// Delete removes the pod. Deleting a pod that is already gone is not an error.
	Delete(ctx context.Context, pod Pod) error
	// List returns every pod the driver manages (those carrying warmpool's labels),
	// oldest first (SortPods), with Ready and Dead filled.
	List(ctx context.Context) ([]Pod, error)
	// Probe checks the pod's health endpoint once; nil means healthy.
	Probe(ctx context.Context, pod Pod) error
}

// SortPods puts pods in the order PodDriver.List returns them: oldest first, by
// CreatedAt, then by ID.
func SortPods(pods []Pod) {
	slices.SortFunc(pods, func(a, b Pod) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
}

// Labels and annotations every driver puts on the pods it creates.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "warmpool"
	LabelScope     = "warmpool.io/scope"
	LabelDeployVer = "warmpool.io/deploy-ver"
	LabelFence     = "warmpool.io/fence"
)

// PodName derives the pod name from the scope and the fencing number: a DNS-1123 label
// of at most 63 chars, unique per (scope, fence). The hash keeps scopes that sanitise
// alike ("a_b", "a.b") apart.
func PodName(scopeID string, fence int64) string {
	sum := sha256.Sum256([]byte(scopeID))
	base := strings.NewReplacer("_", "-", ".", "-").Replace(scopeID)
	if len(base) > 32 {
		base = base[:32]
	}
	return base + "-" + hex.EncodeToString(sum[:])[:6] + "-" + strconv.FormatInt(fence, 10)
}

// Lease is what an acquire hands out: a pod and how it was found. Claim, when set, is a
// slot reserved on the pod for the caller until it binds a session with it or the claim
// expires.
type Lease struct {
	Pod    Pod    `json:"pod"`
	Source string `json:"source"`
	Claim  string `json:"claim,omitempty"`
}

// Acquire sources: how a pod was found for a caller.
const (
	SourceWarm     = "warm"
	SourceDeployed = "deployed"
	SourceFollower = "follower"
)

// Route sources beyond the acquire ones: a session already bound to its pod, and a
// route that waited in the scope's queue for capacity.
const (
	SourceAffinity = "affinity"
	SourceQueued   = "queued"
)

// Clock tells the time; tests inject a controllable one.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewID returns a random 128-bit id in hex (32 characters), the one source of claim,
// waiter and lock tokens; a shorter random suffix is a prefix of one.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// UnixMs is t in milliseconds since the epoch, the unit of every time in Redis.
func UnixMs(t time.Time) int64 { return t.UnixMilli() }

// Pool is what the session manager needs of the resource manager (rm.Manager); cmd
// wires one to the other so that neither imports the other.
type Pool interface {
	// Acquire hands out a pod of the scope with a claimed slot on it. Errors:
	// SCOPE_NOT_FOUND, NO_POD_AVAILABLE (wrapping ErrPoolFull when the scope is at
	// max_pods with no deploy to join), DEPLOY_FAILED, STORE_UNAVAILABLE.
	Acquire(ctx context.Context, scope string) (Lease, error)
	// ReleaseClaim gives back a claim that will not be bound: its slot goes to the
	// oldest waiter, or is freed (a pod left without slots goes idle).
	// Errors: STORE_UNAVAILABLE.
	ReleaseClaim(ctx context.Context, scope, claim string) error
}

// ErrPoolFull marks a NO_POD_AVAILABLE that says the scope is at max_pods and every
// pod and deploy is full: the caller may queue for capacity.
var ErrPoolFull = errors.New("scope is at max_pods")

// NamespaceWatcher is implemented by drivers whose List covers only the namespaces they
// were told about (k8s.Kubernetes): the sweeper names every scope's namespace ("" for
// the driver's default) before it lists.
type NamespaceWatcher interface {
	WatchNamespace(ctx context.Context, namespace string) error
}

// PodEvent is what a driver saw happen to one of its pods: it appeared, changed (became
// ready, died) or is gone.
type PodEvent struct {
	// Pod is the pod as the driver sees it now, Ready and Dead filled; a gone pod is
	// Dead and not Ready.
	Pod Pod
	// Gone: the pod is no longer in the driver (deleted, by anyone).
	Gone bool
	// Resync: the driver may have missed changes (its watch failed): the receiver
	// should list the driver again. Pod is zero.
	Resync bool
}

// PodNotifier is implemented by drivers that learn of their pods' changes as they happen
// (k8s.Kubernetes from its informers' add, update and delete events, local.Driver from
// a process's start, readiness and exit, fake.Driver from its own calls and, sharing a
// state directory, from watching it): the sweeper buries a dead pod at once, and handles
// a pod Redis does not know as an orphan once its grace has passed, instead of finding
// either at its next look at the driver's list or at the full pass.
type PodNotifier interface {
	// OnPodEvent makes the driver call fn with each event of a pod it manages, from now
	// on for its whole life; the pods the driver had before are reported as they are
	// (a watch's initial list). A pod may be reported more than once, and pods the
	// caller never registered are reported too. fn must not block.
	OnPodEvent(fn func(PodEvent))
}

// DeployPolicy holds a scope's deploy spec to the operator's rules (SPEC §11.1: the
// pod template's fields, the Pod Security level, the namespaces, images and resource
// caps allowed) before it is stored. The binary installs one built on Kubernetes'
// types; without one, specs are held only to Normalize's checks.
type DeployPolicy interface {
	// Check refuses, with VALIDATION naming each field and rule, a spec whose pod
	// breaks the rules.
	Check(ctx context.Context, scope string, spec DeploySpec) error
	// Render is the pod the spec deploys, as a dry run answers it.
	Render(ctx context.Context, scope string, spec DeploySpec) (any, error)
}

// DryRunner is a driver that can ask its cluster whether it would create a spec's pod
// (a server-side dry run): what the cluster refuses (admission, quota, an unknown
// runtime class or service account) is VALIDATION with the cluster's message. The pod
// it answers is the one a deploy of the spec creates, the driver's own settings
// included, as a dry run's answer shows it.
type DryRunner interface {
	DryRun(ctx context.Context, scope string, spec DeploySpec) (pod any, err error)
}

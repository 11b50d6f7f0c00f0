package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/podpolicy"
)

// Defaults of Config, in one place.
const (
	DefaultNamespace          = podpolicy.DefaultNamespace
	DefaultAPITimeout         = 10 * time.Second
	DefaultRetries            = 3
	DefaultRetryBackoff       = 200 * time.Millisecond
	DefaultProbeTimeout       = 2 * time.Second
	DefaultDeleteGrace        = 5 * time.Second
	DefaultNodeLostGrace      = 30 * time.Second
	DefaultUnschedulableGrace = 5 * time.Second
	DefaultResyncPeriod       = 5 * time.Minute
	DefaultCacheSyncTimeout   = 30 * time.Second
	DefaultInformerIdle       = 10 * time.Minute
	DefaultCleanupTimeout     = 30 * time.Second
	DefaultCreateSettle       = 2 * time.Second
	DefaultMaxInFlight        = 100
	// DefaultNameRetries bounds the new names tried after genuine name clashes.
	DefaultNameRetries = 3
	maxRetryBackoff    = 3 * time.Second
)

// Config tunes the Kubernetes driver. Zero fields take the Default* values.
type Config struct {
	// Namespace is where pods go when the scope template names none (--namespace).
	Namespace string
	// APITimeout bounds each API call (one attempt of a create, get, delete, list).
	APITimeout time.Duration
	// Retries is how often a call is retried after a transient error (5xx, 429,
	// timeouts, connection errors); 4xx answers are never retried. Negative: no retries.
	Retries int
	// RetryBackoff is the first pause between attempts; it doubles up to 3s, jittered.
	RetryBackoff time.Duration
	// ProbeTimeout bounds one health probe.
	ProbeTimeout time.Duration
	// DeleteGrace is the grace period of Delete (and the pods' termination grace).
	DeleteGrace time.Duration
	// NodeLostGrace is how long a node may be NotReady before its pods count as dead.
	NodeLostGrace time.Duration
	// UnschedulableGrace is how long a deploy tolerates PodScheduled=False/Unschedulable
	// before it fails: the scheduler often reports it once before a node frees up.
	UnschedulableGrace time.Duration
	// ResyncPeriod is the informers' resync: OnPod sees every pod again this often.
	ResyncPeriod time.Duration
	// CacheSyncTimeout bounds the wait for a namespace's pod cache to fill on first use.
	CacheSyncTimeout time.Duration
	// InformerIdle is how long the pod informer of a namespace other than Namespace
	// runs with no pod and no deploy before it is stopped.
	InformerIdle time.Duration
	// NameRetries bounds the fresh names tried after genuine 409 name clashes.
	NameRetries int
	// CleanupTimeout bounds how long a failed deploy keeps trying to delete its pod
	// while the API server does not answer. The deploy, and so its scope's deploy slot,
	// is held meanwhile: a pod left alive would otherwise be joined by the next
	// deploy's once the server is back, more than max_pods. Past it, reconcile deletes
	// what is left.
	CleanupTimeout time.Duration
	// CreateSettle is how long after a create that got no answer the driver looks
	// again for its pod when it found none: a server that was stopped may apply the
	// create only after it answers again.
	CreateSettle time.Duration
	// MaxInFlight bounds the driver's API calls in flight (creates, reads, deletes;
	// not the informers' lists and watches): past it a call waits for a turn. It is no
	// rate: it keeps a burst within the concurrent streams of one HTTP/2 connection,
	// beyond which client-go dials more (a burst of 1,000 creates opened about 50 TLS
	// connections to the rig's API server, and closed them again), and within the
	// server's own in-flight limits.
	MaxInFlight int
	// NodeSelector, when set, is put on every pod (e.g. a dedicated node pool).
	NodeSelector map[string]string
	// PodAnnotations are added to every pod (e.g. for a mesh or the autoscaler); they
	// never override the driver's own warmpool.io annotations.
	PodAnnotations map[string]string
	// DisableNodeWatch skips the node informer: node loss is then only seen through the
	// pods' own status. The driver also runs without it when RBAC forbids listing nodes.
	DisableNodeWatch bool
	// Logger receives the driver's logs; nil discards them.
	Logger *slog.Logger
	// Clock stamps phase events, creation times and death checks; nil is the wall clock.
	Clock warmpool.Clock
	// OnPhase, when set, is told each phase of every deploy (for metrics). It must not
	// block.
	OnPhase func(PhaseEvent)
	// OnPod, when set, is called from the informers with every add, update, resync and
	// delete of a managed pod (Ready and Dead filled), so a watcher can react to deaths
	// without polling. It must not block.
	OnPod func(warmpool.Pod)
}

func (c *Config) fill() {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	defaults.Positive(&c.APITimeout, DefaultAPITimeout)
	defaults.Positive(&c.RetryBackoff, DefaultRetryBackoff)
	defaults.Positive(&c.ProbeTimeout, DefaultProbeTimeout)
	defaults.Positive(&c.DeleteGrace, DefaultDeleteGrace)
	defaults.Positive(&c.NodeLostGrace, DefaultNodeLostGrace)
	defaults.Positive(&c.UnschedulableGrace, DefaultUnschedulableGrace)
	defaults.Positive(&c.ResyncPeriod, DefaultResyncPeriod)
	defaults.Positive(&c.CacheSyncTimeout, DefaultCacheSyncTimeout)
	defaults.Positive(&c.InformerIdle, DefaultInformerIdle)
	defaults.Positive(&c.NameRetries, DefaultNameRetries)
	defaults.Positive(&c.CleanupTimeout, DefaultCleanupTimeout)
	defaults.Positive(&c.CreateSettle, DefaultCreateSettle)
	defaults.Positive(&c.MaxInFlight, DefaultMaxInFlight)
	switch {
	case c.Retries == 0:
		c.Retries = DefaultRetries
	case c.Retries < 0:
		c.Retries = 0
	}
	c.Logger, c.Clock = defaults.Logger(c.Logger), defaults.Clock(c.Clock)
}

// DeployPhase names a step of a deploy, reported through Config.OnPhase.
type DeployPhase string

// The phases of a deploy, in order; PhaseFailed ends a deploy that did not get ready.
const (
	PhaseCreated   DeployPhase = "created"
	PhaseScheduled DeployPhase = "scheduled"
	PhaseStarted   DeployPhase = "started"
	PhaseReady     DeployPhase = "ready"
	PhaseFailed    DeployPhase = "failed"
)

// rootPhases names the phases in the terms of warmpool.DeployRequest.OnPhase.
var rootPhases = map[DeployPhase]string{
	PhaseCreated:   warmpool.PhaseCreate,
	PhaseScheduled: warmpool.PhaseScheduled,
	PhaseStarted:   warmpool.PhaseStarted,
	PhaseReady:     warmpool.PhaseReady,
}

// PhaseEvent is one step of one deploy.
type PhaseEvent struct {
	ScopeID   string
	DeployVer string
	Fence     int64
	Namespace string
	Pod       string
	Phase     DeployPhase
	At        time.Time
	// Elapsed is the time since Deploy was called.
	Elapsed time.Duration
	// Reason says why a deploy failed (PhaseFailed only).
	Reason string
}

// Kubernetes is the production pod driver: it creates agent pods through the API server
// with client-go, waits for them with a watch and lists them from shared informers.
// Deploy receives a normalized spec (warmpool.ScopeConfig.Normalize) and fills no
// defaults; only the namespace falls back to Config.Namespace, the driver's own.
type Kubernetes struct {
	client corev1client.CoreV1Interface
	cfg    Config
	log    *slog.Logger
	http   *http.Client
	turns  chan struct{} // one per API call in flight, at most MaxInFlight

	mu     sync.Mutex
	closed bool
	caches map[string]*nsCache // namespace -> pod informer
	nodes  *nodeCache          // nil until the first namespace starts
	timers map[*time.Timer]struct{}
	events []func(warmpool.PodEvent) // OnPodEvent's functions; replaced, never changed in place
}

var (
	_ warmpool.PodDriver   = (*Kubernetes)(nil)
	_ warmpool.PodNotifier = (*Kubernetes)(nil)
)

// NewKubernetes returns a driver that talks to the API server through client, a core/v1
// client (NewClient's, or a clientset's CoreV1()). Informers start lazily (on the first
// Deploy, List or WatchNamespace of a namespace); Close stops them.
func NewKubernetes(client corev1client.CoreV1Interface, cfg Config) *Kubernetes {
	cfg.fill()
	return &Kubernetes{
		client: client,
		cfg:    cfg,
		log:    cfg.Logger.With("component", "k8s"),
		http: &http.Client{Transport: &http.Transport{
			Proxy:               nil, // pods are reached directly, never through a proxy
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		}},
		turns:  make(chan struct{}, cfg.MaxInFlight),
		caches: map[string]*nsCache{},
		timers: map[*time.Timer]struct{}{},
	}
}

// Log keys.
const (
	logPod       = "pod"
	logNamespace = "namespace"
	logScope     = "scope"
	logErr       = "err"
)

func (k *Kubernetes) namespace(ns string) string {
	if ns == "" {
		return k.cfg.Namespace
	}
	return ns
}

// Delete removes the pod with the configured grace period. A pod that is already gone is
// not an error. Errors: the API server's, after bounded retries of transient ones.
func (k *Kubernetes) Delete(ctx context.Context, pod warmpool.Pod) error {
	if pod.ID == "" {
		return warmpool.Errorf(warmpool.CodeValidation, "pod id: empty")
	}
	ns := k.namespace(pod.Namespace)
	if err := k.deletePod(ctx, ns, pod.ID, nil); err != nil {
		return fmt.Errorf("delete pod %s/%s: %w", ns, pod.ID, err)
	}
	return nil
}

func (k *Kubernetes) deletePod(ctx context.Context, ns, name string, pre *metav1.Preconditions) error {
	grace := int64(k.cfg.DeleteGrace / time.Second)
	err := k.call(ctx, func(ctx context.Context) error {
		return k.client.Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: pre})
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Probe sends one GET to the pod's health URL with a short timeout; any 2xx is healthy.
func (k *Kubernetes) Probe(ctx context.Context, pod warmpool.Pod) error {
	if pod.HealthURL == "" {
		return fmt.Errorf("probe pod %s: no health url", pod.ID)
	}
	ctx, cancel := context.WithTimeout(ctx, k.cfg.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pod.HealthURL, nil)
	if err != nil {
		return fmt.Errorf("probe pod %s: %w", pod.ID, err)
	}
	resp, err := k.http.Do(req)
	if err != nil {
		return fmt.Errorf("probe pod %s: %w", pod.ID, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("probe pod %s: %s answered %d", pod.ID, pod.HealthURL, resp.StatusCode)
	}
	return nil
}

// call runs one API call with a per-attempt timeout and retries transient failures
// with jittered exponential backoff, at most cfg.Retries times, pausing at least the
// delay the server asked for (a 429 of priority and fairness, a 503 naming its
// Retry-After: client-go retries those itself first, and hands them on after 10). A 4xx
// answer, or the end of ctx, ends it at once. Each attempt waits for one of the
// MaxInFlight turns first; the wait is not part of its timeout.
func (k *Kubernetes) call(ctx context.Context, fn func(ctx context.Context) error) error {
	backoff := k.cfg.RetryBackoff
	for attempt := 0; ; attempt++ {
		select {
		case k.turns <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		actx, cancel := context.WithTimeout(ctx, k.cfg.APITimeout)
		err := fn(actx)
		cancel()
		<-k.turns
		if err == nil || !transient(err) || attempt >= k.cfg.Retries || ctx.Err() != nil {
			return err
		}
		k.log.DebugContext(ctx, "transient API error; retrying", "attempt", attempt+1, logErr, err)
		pause := backoff/2 + rand.N(backoff/2+1)
		if s, ok := apierrors.SuggestsClientDelay(err); ok {
			pause = max(pause, time.Duration(s)*time.Second)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		backoff = min(2*backoff, maxRetryBackoff)
	}
}

// transient reports whether err is worth retrying: server-side trouble (5xx, 429) or no
// answer at all (timeout, connection error). Every other API answer (4xx) is final.
func transient(err error) bool {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := st.Status().Code
		return code == http.StatusTooManyRequests || code >= 500 ||
			apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err)
	}
	return !errors.Is(err, context.Canceled)
}

// Close stops the informers and waits for their goroutines. The driver must not be used
// afterwards. Close is idempotent.
func (k *Kubernetes) Close() error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil
	}
	k.closed = true
	caches, nodes := k.caches, k.nodes
	k.caches, k.nodes = map[string]*nsCache{}, nil
	for t := range k.timers {
		t.Stop()
	}
	clear(k.timers)
	k.mu.Unlock()
	for _, c := range caches {
		c.stop()
	}
	if nodes != nil {
		nodes.stop()
	}
	k.http.CloseIdleConnections()
	return nil
}

package k8s

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
)

// Defaults of Config, in one place.
const (
	DefaultNamespace          = "default"
	DefaultAPITimeout         = 10 * time.Second
	DefaultRetries            = 3
	DefaultRetryBackoff       = 200 * time.Millisecond
	DefaultProbeTimeout       = 2 * time.Second
	DefaultDeleteGrace        = 5 * time.Second
	DefaultNodeLostGrace      = 30 * time.Second
	DefaultUnschedulableGrace = 5 * time.Second
	DefaultResyncPeriod       = 5 * time.Minute
	DefaultCacheSyncTimeout   = 30 * time.Second
	DefaultCleanupTimeout     = 30 * time.Second
	DefaultCreateSettle       = 2 * time.Second
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
	defaults.Positive(&c.NameRetries, DefaultNameRetries)
	defaults.Positive(&c.CleanupTimeout, DefaultCleanupTimeout)
	defaults.Positive(&c.CreateSettle, DefaultCreateSettle)
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

	mu     sync.Mutex
	closed bool
	caches map[string]*nsCache // namespace -> pod informer
	nodes  *nodeCache          // nil until the first namespace starts
	timers map[*time.Timer]struct{}
	deaths []func(warmpool.Pod) // OnDeath's functions; replaced, never changed in place
}

var (
	_ warmpool.PodDriver     = (*Kubernetes)(nil)
	_ warmpool.DeathNotifier = (*Kubernetes)(nil)
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

// Deploy creates the scope's pod and waits, with a watch, until it is Running and Ready,
// at most Spec.ReadyTimeoutS. Errors: DEPLOY_FAILED naming the reason (image pull,
// crash loop, terminated container, unschedulable, deleted, failed, timeout, API
// refusal); VALIDATION for a template the pod cannot be built from (a spec that was not
// normalized, such as a ready timeout under a second); ctx.Err() when ctx
// ends first. Whatever Deploy created is deleted again when it fails.
func (k *Kubernetes) Deploy(ctx context.Context, req warmpool.DeployRequest) (warmpool.Pod, error) {
	start := time.Now()
	ns := k.namespace(req.Spec.Namespace)
	k.cacheFor(ns) // so List sees the namespace from now on; does not wait
	d := &deployment{k: k, req: req, ns: ns, start: start}
	log := k.log.With(logScope, req.ScopeID, logNamespace, ns)

	timeout := time.Duration(req.Spec.ReadyTimeoutS) * time.Second
	if timeout <= 0 {
		return warmpool.Pod{}, warmpool.Errorf(warmpool.CodeValidation, "deploy.ready_timeout_s: must be positive, got %d", req.Spec.ReadyTimeoutS)
	}
	wctx, cancel := context.WithTimeoutCause(ctx, timeout, errReadyTimeout)
	defer cancel()

	created, err := d.create(wctx)
	if err == nil {
		d.phase(PhaseCreated, "")
		var ready *corev1.Pod
		ready, err = d.await(wctx, created)
		if err == nil {
			p := kubePod(ready)
			p.Ready = true
			log.InfoContext(ctx, "pod ready", logPod, ready.Name, "took", time.Since(start).Round(time.Millisecond))
			return p, nil
		}
	}
	// Failure: the reason, in the caller's terms.
	switch {
	case ctx.Err() != nil:
		err = ctx.Err()
	case errors.Is(context.Cause(wctx), errReadyTimeout):
		err = warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s/%s not ready after %s%s", ns, d.name, timeout, kubeMsg(d.last))
	}
	d.phase(PhaseFailed, err.Error())
	if d.owns || d.maybe {
		k.cleanup(context.WithoutCancel(ctx), d)
	}
	log.WarnContext(ctx, "deploy failed", logPod, d.name, logErr, err)
	return warmpool.Pod{}, err
}

var errReadyTimeout = errors.New("ready timeout")

// deployment is the state of one Deploy call.
type deployment struct {
	k     *Kubernetes
	req   warmpool.DeployRequest
	ns    string
	name  string
	owns  bool      // a pod was created (or adopted) and must go if the deploy fails
	maybe bool      // a create got no answer: the server may have made (or yet make) the pod
	uid   types.UID // its UID, when the server gave one
	start time.Time

	scheduled    bool
	started      bool
	unschedSince time.Time
	last         string // the last state seen, for the timeout message
}

func (d *deployment) phase(ph DeployPhase, reason string) {
	if root, ok := rootPhases[ph]; ok {
		d.req.Phase(root)
	}
	if d.k.cfg.OnPhase == nil {
		return
	}
	d.k.cfg.OnPhase(PhaseEvent{
		ScopeID: d.req.ScopeID, DeployVer: d.req.DeployVer, Fence: d.req.Fence,
		Namespace: d.ns, Pod: d.name, Phase: ph, At: d.k.cfg.Clock.Now(),
		Elapsed: time.Since(d.start), Reason: reason,
	})
}

func deployFailed(format string, args ...any) error {
	return warmpool.Errorf(warmpool.CodeDeployFailed, format, args...)
}

// create makes the pod. AlreadyExists with our own labels (scope, deploy_ver, fence) is
// our earlier create (a retried request that did reach the server, or a repeated deploy
// of the same fence): that pod is adopted. Any other AlreadyExists is a genuine clash,
// retried under a fresh name a bounded number of times.
func (d *deployment) create(ctx context.Context) (*corev1.Pod, error) {
	k := d.k
	pods := k.client.Pods(d.ns)
	d.name = warmpool.PodName(d.req.ScopeID, d.req.Fence)
	base := d.name
	for clashes := 0; ; {
		obj, err := newAgentPod(d.req, d.name, d.ns, k.cfg.Clock.Now(), podExtras{
			grace: k.cfg.DeleteGrace, nodeSelector: k.cfg.NodeSelector, annotations: k.cfg.PodAnnotations})
		if err != nil {
			return nil, err
		}
		var created *corev1.Pod
		err = k.call(ctx, func(ctx context.Context) (err error) {
			created, err = pods.Create(ctx, obj, metav1.CreateOptions{})
			return err
		})
		if err == nil {
			d.owns, d.uid = true, created.UID
			return created, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			d.maybe = d.maybe || transient(err) || ctx.Err() != nil
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, deployFailed("create pod %s/%s: %v", d.ns, d.name, err)
		}
		var existing *corev1.Pod
		gerr := k.call(ctx, func(ctx context.Context) (err error) {
			existing, err = pods.Get(ctx, d.name, metav1.GetOptions{})
			return err
		})
		switch {
		case gerr == nil && kubeOwnPod(existing, d.req):
			k.log.InfoContext(ctx, "pod already exists from this deploy; waiting for it", logPod, d.name, logNamespace, d.ns)
			d.owns, d.uid = true, existing.UID
			return existing, nil
		case gerr != nil && !apierrors.IsNotFound(gerr):
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, deployFailed("create pod %s/%s: name taken and the pod cannot be read: %v", d.ns, d.name, gerr)
		}
		// Someone else's pod holds the name (or it vanished meanwhile): a fresh name.
		clashes++
		if clashes > k.cfg.NameRetries {
			return nil, deployFailed("create pod %s/%s: name clashes with %d other pods", d.ns, base, clashes)
		}
		k.log.WarnContext(ctx, "pod name taken by another pod; retrying with a new name", logPod, d.name, logNamespace, d.ns)
		d.name = kubeClashName(base)
	}
}

// verdict is what one observation of the pod means for the wait.
type verdict int

const (
	pending verdict = iota
	ready
	failed
)

// observe classifies one state of the pod; for failed it also returns the reason.
// It records the scheduled phase and starts or stops the unschedulable grace clock.
func (d *deployment) observe(p *corev1.Pod, now time.Time) (verdict, string) {
	if d.uid != "" && p.UID != d.uid {
		return failed, fmt.Sprintf("pod %s/%s was deleted and replaced by another", d.ns, d.name)
	}
	if !d.scheduled && p.Spec.NodeName != "" {
		d.scheduled = true
		d.phase(PhaseScheduled, "")
	}
	if !d.started && p.Status.Phase == corev1.PodRunning {
		d.started = true
		d.phase(PhaseStarted, "")
	}
	if reason := kubeEarlyFailure(p); reason != "" {
		return failed, fmt.Sprintf("pod %s/%s: %s", d.ns, d.name, reason)
	}
	if reason := kubePodDeath(p, nil, false, now, 0); reason != "" {
		return failed, fmt.Sprintf("pod %s/%s %s", d.ns, d.name, reason)
	}
	if kubeReady(p) {
		d.phase(PhaseReady, "")
		return ready, ""
	}
	c := kubePodCond(p, corev1.PodScheduled)
	if p.Spec.NodeName == "" && c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
		if d.unschedSince.IsZero() {
			d.unschedSince = now
		}
		d.last = "unschedulable" + kubeMsg(c.Message)
	} else {
		d.unschedSince = time.Time{}
		d.last = kubeState(p)
	}
	return pending, ""
}

// fatalWaiting are container waiting reasons that will not resolve by themselves
// within a deploy.
var fatalWaiting = map[string]string{
	"ErrImagePull":               "image pull failed",
	"ImagePullBackOff":           "image pull failed",
	"InvalidImageName":           "invalid image name",
	"ErrImageNeverPull":          "image not present and pull policy Never",
	"CrashLoopBackOff":           "crash loop",
	"CreateContainerConfigError": "container config error",
}

// kubeEarlyFailure reports a container state that ends a deploy at once: a fatal
// waiting reason or a terminated container.
func kubeEarlyFailure(p *corev1.Pod) string {
	for _, cs := range kubeStatuses(p) {
		if w := cs.State.Waiting; w != nil {
			if what, ok := fatalWaiting[w.Reason]; ok {
				return fmt.Sprintf("container %s: %s (%s)%s", cs.Name, what, w.Reason, kubeMsg(w.Message))
			}
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			return kubeTerminated(p)
		}
	}
	return ""
}

// kubeState is a short description of a pending pod, for timeout messages.
func kubeState(p *corev1.Pod) string {
	s := "phase " + kubeFirst(string(p.Status.Phase), "unknown")
	if p.Spec.NodeName == "" {
		s += ", not scheduled"
	} else {
		s += ", on node " + p.Spec.NodeName
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			s += ", container " + cs.Name + " waiting: " + w.Reason
		}
	}
	return s
}

// await watches the pod until it is ready or has failed, starting from the resource
// version of the create response. A closed or expired watch is resumed after a fresh
// Get, so no state change is missed.
func (d *deployment) await(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	k := d.k
	pods := k.client.Pods(d.ns)
	var graceC <-chan time.Time
	var graceT *time.Timer
	defer func() {
		if graceT != nil {
			graceT.Stop()
		}
	}()
	// check applies one observation; done reports the end of the wait.
	check := func(p *corev1.Pod) (done bool, err error) {
		v, reason := d.observe(p, k.cfg.Clock.Now())
		switch v {
		case ready:
			return true, nil
		case failed:
			return true, deployFailed("%s", reason)
		}
		switch {
		case d.unschedSince.IsZero() && graceT != nil:
			graceT.Stop()
			graceT, graceC = nil, nil
		case !d.unschedSince.IsZero() && graceT == nil:
			graceT = time.NewTimer(k.cfg.UnschedulableGrace)
			graceC = graceT.C
		}
		return false, nil
	}
	refetch := func() (*corev1.Pod, error) {
		var cur *corev1.Pod
		err := k.call(ctx, func(ctx context.Context) (err error) {
			cur, err = pods.Get(ctx, d.name, metav1.GetOptions{})
			return err
		})
		switch {
		case apierrors.IsNotFound(err):
			return nil, deployFailed("pod %s/%s was deleted while starting", d.ns, d.name)
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, deployFailed("read pod %s/%s: %v", d.ns, d.name, err)
		}
		return cur, nil
	}

	if done, err := check(p); done {
		return p, err
	}
	rv := p.ResourceVersion
	for {
		var w watch.Interface
		err := k.call(ctx, func(context.Context) (err error) {
			// The stream lives as long as the deploy, so it takes the deploy's ctx (bounded
			// by ready_timeout_s), not the per-attempt one, which would cut it off.
			w, err = pods.Watch(ctx, metav1.ListOptions{
				FieldSelector:       fields.OneTermEqualSelector("metadata.name", d.name).String(),
				ResourceVersion:     rv,
				AllowWatchBookmarks: true,
			})
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
				return nil, deployFailed("watch pod %s/%s: %v", d.ns, d.name, err)
			}
		} else {
			p, err := d.drain(ctx, w, &rv, check, &graceC)
			w.Stop()
			if p != nil || err != nil {
				return p, err
			}
		}
		// The watch ended or its version expired: resync with a Get, then watch again.
		cur, err := refetch()
		if err != nil {
			return nil, err
		}
		if done, err := check(cur); done {
			return cur, err
		}
		rv = cur.ResourceVersion
	}
}

// drain consumes one watch until the wait ends (pod or error returned) or the watch
// closes or expires (nil, nil: the caller resyncs and watches again).
func (d *deployment) drain(ctx context.Context, w watch.Interface, rv *string,
	check func(*corev1.Pod) (bool, error), graceC *<-chan time.Time) (*corev1.Pod, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-*graceC:
			return nil, deployFailed("pod %s/%s is unschedulable for %s: %s", d.ns, d.name, d.k.cfg.UnschedulableGrace, d.last)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, nil
			}
			switch ev.Type {
			case watch.Error:
				// Expired version (410) or another server-side end: resync and re-watch.
				if err := apierrors.FromObject(ev.Object); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
					d.k.log.WarnContext(ctx, "pod watch error; resyncing", logPod, d.name, logErr, err)
				}
				return nil, nil
			case watch.Bookmark:
				if m, err := metaOf(ev.Object); err == nil {
					*rv = m
				}
				continue
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Name != d.name {
				continue // a fake or proxy that ignores the field selector
			}
			*rv = p.ResourceVersion
			if ev.Type == watch.Deleted {
				if p.UID == d.uid {
					return nil, deployFailed("pod %s/%s was deleted while starting", d.ns, d.name)
				}
				continue
			}
			if done, err := check(p); done {
				return p, err
			}
		}
	}
}

func metaOf(obj any) (string, error) {
	if o, ok := obj.(metav1.Object); ok {
		return o.GetResourceVersion(), nil
	}
	return "", errors.New("no metadata")
}

// cleanup deletes the pod of a failed deploy and returns once the API server has
// confirmed that no pod of the deploy is left alive, or after CleanupTimeout (then the
// pod is logged, and reconcile deletes it). A pod the server never named to us (the
// create got no answer) is looked for by name, and looked for once more after
// CreateSettle when it was not found. Only a transient error (no answer, 5xx, 429) is
// retried: a final one (403, …) would only answer the same until the timeout.
func (k *Kubernetes) cleanup(ctx context.Context, d *deployment) {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.CleanupTimeout)
	defer cancel()
	lookAgain := d.uid == ""
	backoff := k.cfg.RetryBackoff
	for {
		notFound, err := k.deleteOwn(ctx, d)
		if err == nil && !(notFound && lookAgain) {
			return
		}
		if err != nil && !transient(err) { // a final answer (403, …): asking again changes nothing
			k.log.ErrorContext(ctx, "pod of a failed deploy not deleted; reconcile deletes it", logPod, d.name, logNamespace, d.ns, logErr, err)
			return
		}
		pause := backoff
		if err == nil {
			lookAgain, pause = false, k.cfg.CreateSettle
		} else {
			backoff = min(2*backoff, maxRetryBackoff)
		}
		select {
		case <-ctx.Done():
			k.log.ErrorContext(ctx, "pod of a failed deploy not confirmed deleted; reconcile deletes it", logPod, d.name, logNamespace, d.ns, logErr, cmp.Or(err, ctx.Err()))
			return
		case <-time.After(pause):
		}
	}
}

// deleteOwn deletes the pod of d: by its UID when the server gave one, else the pod of
// its name when that is d's own (kubeOwnPod). notFound says no pod of d's name was
// there; a pod of that name that is not d's is left alone.
func (k *Kubernetes) deleteOwn(ctx context.Context, d *deployment) (notFound bool, err error) {
	uid := d.uid
	if uid == "" {
		var p *corev1.Pod
		err := k.call(ctx, func(ctx context.Context) (err error) {
			p, err = k.client.Pods(d.ns).Get(ctx, d.name, metav1.GetOptions{})
			return err
		})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			return false, err
		case !kubeOwnPod(p, d.req):
			return false, nil
		}
		uid = p.UID
	}
	err = k.deletePod(ctx, d.ns, d.name, &metav1.Preconditions{UID: &uid})
	if apierrors.IsConflict(err) { // the name now holds another pod: ours is gone
		return false, nil
	}
	return false, err
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
// with jittered exponential backoff, at most cfg.Retries times. A 4xx answer, or the end
// of ctx, ends it at once.
func (k *Kubernetes) call(ctx context.Context, fn func(ctx context.Context) error) error {
	backoff := k.cfg.RetryBackoff
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, k.cfg.APITimeout)
		err := fn(actx)
		cancel()
		if err == nil || !transient(err) || attempt >= k.cfg.Retries || ctx.Err() != nil {
			return err
		}
		k.log.DebugContext(ctx, "transient API error; retrying", "attempt", attempt+1, logErr, err)
		pause := backoff/2 + rand.N(backoff/2+1)
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

package k8s

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/warmpool/warmpool"
)

// Deploy creates the scope's pod and waits, on the namespace's pod informer, until it is
// Running and Ready, at most Spec.ReadyTimeoutS: one API request (the create) once the
// namespace's informer has synced. Errors: DEPLOY_FAILED naming the reason (image pull,
// crash loop, terminated container, unschedulable, deleted, failed, timeout, API
// refusal); VALIDATION for a template the pod cannot be built from (a spec that was not
// normalized, such as a ready timeout under a second); ctx.Err() when ctx
// ends first. Whatever Deploy created is deleted again when it fails.
func (k *Kubernetes) Deploy(ctx context.Context, req warmpool.DeployRequest) (warmpool.Pod, error) {
	start := time.Now()
	ns := k.namespace(req.Spec.Namespace)
	k.cacheFor(ns) // so List sees the namespace from now on; does not wait
	d := &deployment{k: k, req: req, ns: ns, start: start}
	defer d.unlisten()
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

	// The wait on the namespace's informer, registered before the create (listen).
	events  <-chan podEvent
	release func()
	synced  bool // the informer had listed the namespace when the wait was registered
}

// listen registers the wait for the pod called d.name on the namespace's informer, and
// ends the wait for the name before. Registered before the create, it misses no event
// of the pod once the informer has listed the namespace.
func (d *deployment) listen() error {
	d.unlisten()
	c := d.k.cacheFor(d.ns)
	if c == nil {
		return deployFailed("pod %s/%s: %v", d.ns, d.name, ErrClosed)
	}
	d.synced = c.informer.HasSynced()
	d.events, d.release = c.wait(d.name, d.k.cfg.Clock.Now())
	return nil
}

// unlisten ends the wait listen registered, if any.
func (d *deployment) unlisten() {
	if d.release != nil {
		d.release()
		d.release = nil
	}
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
		obj, err := k.render(d.req, d.name, d.ns)
		if err != nil {
			return nil, err
		}
		if err := d.listen(); err != nil {
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
			return nil, deployFailed("create pod %s/%s: %v", d.ns, d.name, apiMessage(err))
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
			return nil, deployFailed("create pod %s/%s: name taken and the pod cannot be read: %v", d.ns, d.name, apiMessage(gerr))
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

// await waits on the namespace's pod informer until the pod is ready or has failed:
// no watch of its own, so the API server keeps one stream per namespace however many
// deploys are in flight, and no read of its own either once the informer has synced.
func (d *deployment) await(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	k := d.k
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
	if done, err := check(p); done {
		return p, err
	}
	// An informer that had not listed the namespace when the wait was registered (the
	// namespace's first deploy) may list it only after the pod is gone, and then sends
	// no event of it: the pod is read once after that list, and every event after the
	// list comes to the wait registered before the create.
	if !d.synced {
		if cur, found, err := d.afterList(ctx); err != nil {
			return nil, err
		} else if !found {
			return nil, deployFailed("pod %s/%s was deleted while starting", d.ns, d.name)
		} else if cur != nil {
			if done, err := check(cur); done {
				return cur, err
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-graceC:
			return nil, deployFailed("pod %s/%s is unschedulable for %s: %s", d.ns, d.name, k.cfg.UnschedulableGrace, d.last)
		case ev := <-d.events:
			if d.uid != "" && ev.pod.UID != d.uid {
				if ev.deleted {
					continue // an older pod of that name going away
				}
			} else if ev.deleted {
				return nil, deployFailed("pod %s/%s was deleted while starting", d.ns, d.name)
			}
			if done, err := check(ev.pod); done {
				return ev.pod, err
			}
		}
	}
}

// afterList reads the pod once the namespace's informer has listed (or after
// CacheSyncTimeout, when it cannot): found false when the pod is gone. Read after the
// list, the pod's delete is either seen here or comes as an event after it.
func (d *deployment) afterList(ctx context.Context) (cur *corev1.Pod, found bool, err error) {
	k := d.k
	if c := k.cacheFor(d.ns); c != nil {
		_ = k.waitSynced(ctx, c) // not synced: the read below still tells what it can
	}
	err = k.call(ctx, func(ctx context.Context) (err error) {
		cur, err = k.client.Pods(d.ns).Get(ctx, d.name, metav1.GetOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case ctx.Err() != nil:
		return nil, false, ctx.Err()
	case err != nil:
		return nil, true, nil // the events tell
	}
	return cur, true, nil
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

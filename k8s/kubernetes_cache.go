package k8s

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/warmpool/warmpool"
)

// ErrClosed is returned by List and WatchNamespace after Close.
var ErrClosed = errors.New("k8s: driver closed")

// managedSelector selects the pods warmpool manages.
var managedSelector = labels.SelectorFromSet(labels.Set{warmpool.LabelManagedBy: warmpool.ManagedByValue}).String()

// running is the lifetime of one started informer.
type running struct {
	cancel   context.CancelFunc
	done     chan struct{} // closed when the informer has stopped
	stopOnce sync.Once
}

// run runs informer until stop (or cancel) is called.
func (r *running) run(informer cache.SharedIndexInformer) {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		informer.RunWithContext(ctx)
	}()
}

// stop stops the informer and waits for it to return.
func (r *running) stop() {
	r.stopOnce.Do(func() {
		r.cancel()
		<-r.done
	})
}

// nsCache is the pod informer of one namespace, label-selected on managed-by.
type nsCache struct {
	running
	mu       sync.Mutex
	w        waiters // deploys waiting for their pods (kubernetes_waiters.go)
	ns       string
	informer cache.SharedIndexInformer
	lister   corelisters.PodLister
	lastErr  atomic.Pointer[error] // the informer's last list/watch error
}

// nodeCache is the node informer: node loss is judged from its cache, never by polling.
type nodeCache struct {
	running
	informer  cache.SharedIndexInformer
	lister    corelisters.NodeLister
	forbidden atomic.Bool
}

// newInformer builds the informer of one core/v1 resource the way client-go's informer
// factory does (resync ResyncPeriod, a namespace index besides indexers), listing and
// watching through lw.
func (k *Kubernetes) newInformer(lw *cache.ListWatch, obj runtime.Object, indexers cache.Indexers) cache.SharedIndexInformer {
	all := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	maps.Copy(all, indexers)
	return cache.NewSharedIndexInformerWithOptions(
		// The client says whether the reflector may list by watch (a fake client cannot).
		cache.ToListWatcherWithWatchListSemantics(lw, k.client), obj,
		cache.SharedIndexInformerOptions{ResyncPeriod: k.cfg.ResyncPeriod, Indexers: all})
}

// node looks up a node in the cache. known is false when the cache cannot tell (not
// synced, forbidden, disabled); node is nil when the node is gone.
func (c *nodeCache) node(name string) (node *corev1.Node, known bool) {
	if c == nil || c.forbidden.Load() || !c.informer.HasSynced() {
		return nil, false
	}
	n, err := c.lister.Get(name)
	switch {
	case err == nil:
		return n, true
	case apierrors.IsNotFound(err):
		return nil, true
	}
	return nil, false
}

// cacheFor returns the pod cache of ns, starting it (and the node cache) on first use
// without waiting for it to sync. It returns nil once the driver is closed.
func (k *Kubernetes) cacheFor(ns string) *nsCache {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil
	}
	if c := k.caches[ns]; c != nil {
		return c
	}
	if k.nodes == nil && !k.cfg.DisableNodeWatch {
		k.nodes = k.startNodes()
	}
	c := &nsCache{ns: ns}
	pods := k.client.Pods(ns)
	c.informer = k.newInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = managedSelector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = managedSelector
			return pods.Watch(ctx, o)
		},
	}, &corev1.Pod{}, cache.Indexers{nodeIndex: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}})
	// managedFields, the largest part of a pod, is never read: dropped before the pod
	// is stored, it is not kept, copied or scanned by the collector. The pod is copied
	// (shallow) rather than changed: a watch may hand out an object its source still
	// holds (client-go's fake tracker does), and writing to it races that source.
	_ = c.informer.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.ManagedFields != nil {
			q := *p
			q.ManagedFields = nil
			return &q, nil
		}
		return obj, nil
	})
	c.lister = corelisters.NewPodLister(c.informer.GetIndexer())
	_ = c.informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		c.lastErr.Store(&err)
		k.log.Warn("pod informer: list/watch failed", logNamespace, ns, logErr, err)
		k.notifyResync()
	})
	_, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.deliver(obj, false); k.notify(obj, false) },
		UpdateFunc: func(_, obj any) { c.deliver(obj, false); k.notify(obj, false) },
		DeleteFunc: func(obj any) { c.deliver(obj, true); k.notify(obj, true) },
	})
	c.touch(k.cfg.Clock.Now())
	c.run(c.informer)
	k.caches[ns] = c
	k.log.Info("pod informer started", logNamespace, ns)
	return c
}

// startNodes starts the node informer. If RBAC forbids reading nodes (the shipped
// least-privilege Role does), it stops itself and node state stays unknown: deaths are
// then seen through the pods' own status (eviction, deletion by the node controller).
func (k *Kubernetes) startNodes() *nodeCache {
	c := &nodeCache{}
	nodes := k.client.Nodes()
	c.informer = k.newInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return nodes.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return nodes.Watch(ctx, o)
		},
	}, &corev1.Node{}, nil)
	c.lister = corelisters.NewNodeLister(c.informer.GetIndexer())
	_ = c.informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			if !c.forbidden.Swap(true) {
				k.log.Warn("nodes cannot be read; node loss is judged from pod status only", logErr, err)
			}
			c.cancel()
			return
		}
		k.log.Warn("node informer: list/watch failed", logErr, err)
	})
	// A node that goes away or changes state re-judges its pods at once.
	_, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := cur.(*corev1.Node)
			if !ok1 || !ok2 || (nodeReadyStatus(o) == nodeReadyStatus(n) && n.DeletionTimestamp == nil) {
				return
			}
			k.notifyNode(n.Name)
			if nodeReadyStatus(n) != corev1.ConditionTrue {
				k.afterGrace(n.Name) // NotReady turns into node-lost once the grace is over
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				k.notifyNode(n.Name)
			}
		},
	})
	c.run(c.informer)
	// Pod events that came before the node cache filled judged their pods without node
	// state, and a pod whose node was gone before then gets no node event after it: so
	// once the cache has synced every cached pod is judged again.
	go func() {
		if cache.WaitForCacheSync(c.done, c.informer.HasSynced) {
			k.notifyCached()
		}
	}()
	return c
}

// notifyCached hands every cached pod to Config.OnPod and to the OnPodEvent functions
// again.
func (k *Kubernetes) notifyCached() {
	k.mu.Lock()
	caches := slices.Collect(maps.Values(k.caches))
	k.mu.Unlock()
	for _, c := range caches {
		for _, obj := range c.informer.GetStore().List() {
			k.notify(obj, false)
		}
	}
}

// nodeIndex indexes cached pods by the node they are bound to.
const nodeIndex = "node"

func nodeReadyStatus(n *corev1.Node) corev1.ConditionStatus {
	if c := kubeNodeCond(n, corev1.NodeReady); c != nil {
		return c.Status
	}
	return ""
}

// afterGrace re-judges the pods of node once NodeLostGrace has passed.
func (k *Kubernetes) afterGrace(node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(k.cfg.NodeLostGrace+time.Second, func() {
		k.mu.Lock()
		delete(k.timers, t)
		k.mu.Unlock()
		k.notifyNode(node)
	})
	k.timers[t] = struct{}{}
}

// notifyNode hands every cached pod on node to Config.OnPod and to the OnPodEvent
// functions again.
func (k *Kubernetes) notifyNode(node string) {
	k.mu.Lock()
	caches := slices.Collect(maps.Values(k.caches))
	k.mu.Unlock()
	for _, c := range caches {
		objs, err := c.informer.GetIndexer().ByIndex(nodeIndex, node)
		if err != nil {
			continue
		}
		for _, obj := range objs {
			k.notify(obj, false)
		}
	}
}

// notify hands one informer event to Config.OnPod and to the OnPodEvent functions.
func (k *Kubernetes) notify(obj any, deleted bool) {
	k.mu.Lock()
	events := k.events
	k.mu.Unlock()
	if k.cfg.OnPod == nil && len(events) == 0 {
		return
	}
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	wp := k.view(p, k.cfg.Clock.Now())
	if deleted {
		wp.Ready = false
		wp.Dead = DeathDeleted + ": pod is gone"
	}
	if k.cfg.OnPod != nil {
		k.cfg.OnPod(wp)
	}
	for _, fn := range events {
		fn(warmpool.PodEvent{Pod: wp, Gone: deleted})
	}
}

// notifyResync tells the OnPodEvent functions that a pod informer's list or watch
// failed: until it has listed again its events may miss changes.
func (k *Kubernetes) notifyResync() {
	k.mu.Lock()
	events := k.events
	k.mu.Unlock()
	for _, fn := range events {
		fn(warmpool.PodEvent{Resync: true})
	}
}

// OnPodEvent makes the informers report each managed pod's add, update, resync and
// delete to fn, with Ready and Dead filled (and a Resync event when an informer's list
// or watch failed): a pod that fails, is evicted, or loses its
// node (after NodeLostGrace, judged from the node informer) is reported dead, and a
// pod deleted by anyone gone. The pods already cached are reported at once; the
// informers of namespaces started later report theirs with their initial list.
func (k *Kubernetes) OnPodEvent(fn func(warmpool.PodEvent)) {
	k.mu.Lock()
	k.events = append(k.events[:len(k.events):len(k.events)], fn)
	caches := slices.Collect(maps.Values(k.caches))
	k.mu.Unlock()
	now := k.cfg.Clock.Now()
	for _, c := range caches {
		for _, obj := range c.informer.GetStore().List() {
			if p, ok := obj.(*corev1.Pod); ok {
				fn(warmpool.PodEvent{Pod: k.view(p, now)})
			}
		}
	}
}

// view is warmpool's view of a cached pod, with Ready and Dead filled.
func (k *Kubernetes) view(p *corev1.Pod, now time.Time) warmpool.Pod {
	wp := kubePod(p)
	wp.Ready = kubeReady(p)
	k.mu.Lock()
	nodes := k.nodes
	k.mu.Unlock()
	var node *corev1.Node
	known := false
	if p.Spec.NodeName != "" {
		node, known = nodes.node(p.Spec.NodeName)
	}
	wp.Dead = kubePodDeath(p, node, known, now, k.cfg.NodeLostGrace)
	if wp.Dead != "" {
		wp.Ready = false
	}
	return wp
}

// waitNodes gives the node cache up to CacheSyncTimeout to fill; node state stays
// unknown (pods are judged by their own status) if it does not, or if nodes are forbidden.
func (k *Kubernetes) waitNodes(ctx context.Context) {
	k.mu.Lock()
	c := k.nodes
	k.mu.Unlock()
	if c == nil {
		return
	}
	done := func() bool { return c.forbidden.Load() || c.informer.HasSynced() }
	if done() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, k.cfg.CacheSyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), done) {
		k.log.Warn("node cache not synced; judging pods by their own status")
	}
}

// WatchNamespace starts the pod informer of ns (if not yet running) and waits for its
// cache to fill, so List covers ns from now on. Reconcile calls it for the namespace of
// every scope; Deploy starts it by itself.
func (k *Kubernetes) WatchNamespace(ctx context.Context, ns string) error {
	c := k.cacheFor(k.namespace(ns))
	if c == nil {
		return ErrClosed
	}
	return k.waitSynced(ctx, c)
}

func (k *Kubernetes) waitSynced(ctx context.Context, c *nsCache) error {
	if c.informer.HasSynced() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, k.cfg.CacheSyncTimeout)
	defer cancel()
	if cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return nil
	}
	msg := "timed out"
	if e := c.lastErr.Load(); e != nil {
		msg = (*e).Error()
	}
	return fmt.Errorf("pod cache of namespace %s not synced: %s", c.ns, msg)
}

// List returns every managed pod (label app.kubernetes.io/managed-by=warmpool) of every
// namespace in use — the default one, those Deploy used and those passed to
// WatchNamespace — from the informers' caches, oldest first, with Ready and Dead
// filled. Only the first List of a namespace waits for its cache; after that List costs
// no API call.
// Errors: a cache that does not sync within CacheSyncTimeout (an incomplete list must
// never pass for the truth), ErrClosed, ctx.Err().
func (k *Kubernetes) List(ctx context.Context) ([]warmpool.Pod, error) {
	if k.cacheFor(k.cfg.Namespace) == nil {
		return nil, ErrClosed
	}
	k.stopIdle()
	k.mu.Lock()
	caches := slices.Collect(maps.Values(k.caches))
	k.mu.Unlock()
	k.waitNodes(ctx)
	now := k.cfg.Clock.Now()
	var out []warmpool.Pod
	for _, c := range caches {
		if err := k.waitSynced(ctx, c); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		objs, err := c.lister.Pods(c.ns).List(labels.Everything())
		if err != nil {
			return nil, fmt.Errorf("list pods of namespace %s: %w", c.ns, err)
		}
		for _, p := range objs {
			if p.Labels[warmpool.LabelManagedBy] == warmpool.ManagedByValue { // a watch may not filter
				out = append(out, k.view(p, now))
			}
		}
	}
	warmpool.SortPods(out)
	return out, nil
}

// stopIdle stops the pod informers of the namespaces no deploy has used for
// Config.InformerIdle and that hold no pod (a scope moved to another namespace, or was
// deleted); the driver's own namespace keeps its informer. A later deploy there starts
// it again.
func (k *Kubernetes) stopIdle() {
	now := k.cfg.Clock.Now()
	var idle []*nsCache
	k.mu.Lock()
	for ns, c := range k.caches {
		if ns != k.cfg.Namespace && c.idle(now, k.cfg.InformerIdle) {
			delete(k.caches, ns)
			idle = append(idle, c)
		}
	}
	k.mu.Unlock()
	for _, c := range idle {
		c.stop()
		k.log.Info("pod informer stopped: no pod and no deploy", logNamespace, c.ns, "idle_for", k.cfg.InformerIdle)
	}
}

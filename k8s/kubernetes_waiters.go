package k8s

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// A deploy waits for its pod on the namespace's informer: one watch stream per
// namespace, whatever the number of deploys in flight. Each deploy registers the name
// of its pod; the informer's handler hands each event of that pod to it, the latest
// one winning when the deploy has not read the one before.

// podEvent is one informer event of a pod a deploy waits for.
type podEvent struct {
	pod     *corev1.Pod
	deleted bool
}

// waiters are the deploys of one namespace waiting for their pods, by pod name.
type waiters struct {
	byName map[string][]chan podEvent // several when deploys of one name meet (a clash, a retried create)
	// lastUse is when a deploy last waited (or a List read the namespace): an informer
	// that holds no pod and has not been used for Config.InformerIdle is stopped.
	lastUse time.Time
}

// wait registers the deploy waiting for the pod called name; release ends the wait.
func (c *nsCache) wait(name string, now time.Time) (events <-chan podEvent, release func()) {
	ch := make(chan podEvent, 1)
	c.mu.Lock()
	if c.w.byName == nil {
		c.w.byName = map[string][]chan podEvent{}
	}
	c.w.byName[name] = append(c.w.byName[name], ch)
	c.w.lastUse = now
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		chs := slices.DeleteFunc(c.w.byName[name], func(x chan podEvent) bool { return x == ch })
		if len(chs) == 0 {
			delete(c.w.byName, name)
		} else {
			c.w.byName[name] = chs
		}
		c.mu.Unlock()
	}
}

// deliver hands an informer event to the deploy waiting for its pod, if any. The
// informer calls its handlers one event at a time, so a drained channel of one slot
// always takes the send.
func (c *nsCache) deliver(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = t.Obj, true
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	c.mu.Lock()
	chs := slices.Clone(c.w.byName[p.Name])
	c.mu.Unlock()
	for _, ch := range chs {
		select {
		case <-ch:
		default:
		}
		ch <- podEvent{pod: p, deleted: deleted}
	}
}

// idle reports whether the namespace's informer may be stopped: it holds no pod, no
// deploy waits on it, and nothing used it for idleFor.
func (c *nsCache) idle(now time.Time, idleFor time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.w.byName) == 0 && now.Sub(c.w.lastUse) >= idleFor && len(c.informer.GetStore().ListKeys()) == 0
}

// touch records a use of the namespace's informer.
func (c *nsCache) touch(now time.Time) {
	c.mu.Lock()
	c.w.lastUse = now
	c.mu.Unlock()
}

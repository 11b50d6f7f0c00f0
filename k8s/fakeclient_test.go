package k8s

import (
	"context"
	"sync"
	"time"

	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	fakecorev1 "k8s.io/client-go/kubernetes/typed/core/v1/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeClient is an in-memory core/v1 API for the driver's unit tests: an object tracker
// on a scheme of core/v1 alone, served by the tracker's object and watch reactors, as
// client-go's fake clientset does for every API group. Reactors prepended on it (errors,
// lost answers) come first.
type fakeClient struct {
	k8stesting.Fake
	tracker k8stesting.ObjectTracker

	mu      sync.Mutex
	gap     map[string]bool // namespaces an informer listed and does not watch yet
	watched chan struct{}   // closed, and replaced, when a watch opens
}

// newFakeClient returns a fakeClient holding objs.
func newFakeClient(objs ...runtime.Object) *fakeClient {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	o := k8stesting.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder())
	for _, obj := range objs {
		if err := o.Add(obj); err != nil {
			panic(err)
		}
	}
	c := &fakeClient{tracker: o, gap: map[string]bool{}, watched: make(chan struct{})}
	c.AddReactor("*", "*", k8stesting.ObjectReaction(o))
	c.AddWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := o.Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		c.mu.Lock()
		delete(c.gap, a.GetNamespace())
		close(c.watched)
		c.watched = make(chan struct{})
		c.mu.Unlock()
		return true, w, nil
	})
	// An API server's watch starts at the resourceVersion of the list before it, so an
	// informer misses no event between its list and its watch; the tracker's watch
	// starts when it opens. A pod created or changed in that gap would be missed, so a
	// create or update (gapPods) waits while an informer's list of its namespace has no
	// watch yet. A reflector lists at resourceVersion "0"; a test's own list asks for
	// none and opens no gap.
	c.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if la, ok := a.(k8stesting.ListActionImpl); ok && la.ListOptions.ResourceVersion != "" {
			c.mu.Lock()
			c.gap[a.GetNamespace()] = true
			c.mu.Unlock()
		}
		return false, nil, nil
	})
	return c
}

// awaitWatch waits, for at most d, until no informer's list of ns waits for its watch.
func (c *fakeClient) awaitWatch(ns string, d time.Duration) {
	deadline := time.After(d)
	for {
		c.mu.Lock()
		gap, watched := c.gap[ns], c.watched
		c.mu.Unlock()
		if !gap {
			return
		}
		select {
		case <-watched:
		case <-deadline:
			return
		}
	}
}

// CoreV1 is the client the driver takes.
func (c *fakeClient) CoreV1() *fakeCoreV1 {
	return &fakeCoreV1{FakeCoreV1: fakecorev1.FakeCoreV1{Fake: &c.Fake}, c: c}
}

// Tracker holds the objects the fake serves.
func (c *fakeClient) Tracker() k8stesting.ObjectTracker { return c.tracker }

// fakeCoreV1 is the fake's core/v1 client.
type fakeCoreV1 struct {
	fakecorev1.FakeCoreV1
	c *fakeClient
}

// Pods is the fake's pods client of ns, whose creates and updates wait out an
// informer's gap between its list and its watch (newFakeClient). The wait is outside the reactors,
// which run under the fake's lock (a reactor that waited would hold up the watch).
func (f *fakeCoreV1) Pods(ns string) corev1client.PodInterface {
	return gapPods{PodInterface: f.FakeCoreV1.Pods(ns), c: f.c, ns: ns}
}

type gapPods struct {
	corev1client.PodInterface
	c  *fakeClient
	ns string
}

func (p gapPods) Create(ctx context.Context, pod *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error) {
	p.c.awaitWatch(p.ns, 10*time.Second)
	return p.PodInterface.Create(ctx, pod, opts)
}

func (p gapPods) Update(ctx context.Context, pod *corev1.Pod, opts metav1.UpdateOptions) (*corev1.Pod, error) {
	p.c.awaitWatch(p.ns, 10*time.Second)
	return p.PodInterface.Update(ctx, pod, opts)
}

// IsWatchListSemanticsUnSupported tells the informers' reflectors to list and then
// watch: the tracker cannot stream a list as a watch (client-go's fake clientset says
// the same).
func (*fakeCoreV1) IsWatchListSemanticsUnSupported() bool { return true }

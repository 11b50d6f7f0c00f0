package k8s

import (
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
	c := &fakeClient{tracker: o}
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
		return true, w, nil
	})
	return c
}

// CoreV1 is the client the driver takes.
func (c *fakeClient) CoreV1() *fakeCoreV1 {
	return &fakeCoreV1{FakeCoreV1: fakecorev1.FakeCoreV1{Fake: &c.Fake}}
}

// Tracker holds the objects the fake serves.
func (c *fakeClient) Tracker() k8stesting.ObjectTracker { return c.tracker }

// fakeCoreV1 is the fake's core/v1 client.
type fakeCoreV1 struct {
	fakecorev1.FakeCoreV1
}

// IsWatchListSemanticsUnSupported tells the informers' reflectors to list and then
// watch: the tracker cannot stream a list as a watch (client-go's fake clientset says
// the same).
func (*fakeCoreV1) IsWatchListSemanticsUnSupported() bool { return true }

package k8s

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/warmpool/warmpool"
)

// runtimeClassSpec is a normalized deploy spec whose pod template names runtimeClass, with an
// env of its own.
func runtimeClassSpec(t *testing.T, runtimeClass string) warmpool.DeploySpec {
	t.Helper()
	cfg, err := warmpool.LoadScopeConfig([]byte(`{"deploy":{"env":{"A":"1"},"pod_template":{"spec":{"runtimeClassName":"` +
		runtimeClass + `","containers":[{"name":"agent"}]}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Deploy
}

// DryRun creates the rendered pod with dryRun=All; what the API server refuses comes
// back as VALIDATION with the server's message and no URL, an unreachable server as a
// retryable STORE_UNAVAILABLE.
func TestDryRun(t *testing.T) {
	cs := newFakeClient()
	var created []*corev1.Pod
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca := a.(k8stesting.CreateActionImpl)
		pod := ca.GetObject().(*corev1.Pod)
		if opts := ca.CreateOptions; len(opts.DryRun) != 1 || opts.DryRun[0] != metav1.DryRunAll {
			t.Errorf("create options %+v: want dryRun=All", opts)
		}
		created = append(created, pod)
		switch rc := pod.Spec.RuntimeClassName; {
		case rc != nil && *rc == "nosuch":
			return true, nil, apierrors.NewForbidden(podsGVR.GroupResource(), pod.Name, errors.New(`pod rejected: RuntimeClass "nosuch" not found`))
		case rc != nil && *rc == "down":
			return true, nil, errors.New(`Post "https://10.0.0.1:6443/api/v1/namespaces/wp/pods?dryRun=All": dial tcp: connection refused`)
		}
		return true, pod, nil
	})
	k := mustKube(t, cs, func(c *Config) { c.RetryBackoff = 0 })
	ctx := context.Background()
	spec := runtimeClassSpec(t, "gvisor")
	if _, err := k.DryRun(ctx, "s", spec); err != nil {
		t.Fatalf("an accepted pod: %v", err)
	}
	if len(created) != 1 || created[0].Namespace != "wp" || *created[0].Spec.RuntimeClassName != "gvisor" {
		t.Fatalf("created %v: want the rendered pod in the driver's namespace", created)
	}
	_, err := k.DryRun(ctx, "s", runtimeClassSpec(t, "nosuch"))
	if warmpool.ErrorCode(err) != warmpool.CodeValidation || !strings.Contains(err.Error(), `RuntimeClass "nosuch" not found`) {
		t.Errorf("refused pod: %v, want VALIDATION with the server's message", err)
	}
	_, err = k.DryRun(ctx, "s", runtimeClassSpec(t, "down"))
	var e *warmpool.Error
	if !errors.As(err, &e) || e.Code != warmpool.CodeStoreUnavailable || e.RetryAfter < 1 || strings.Contains(e.Message, "10.0.0.1") {
		t.Errorf("unreachable server: %v, want a retryable STORE_UNAVAILABLE without the server's address", err)
	}
}

// fixedClock is a clock that stands still.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// The pod a dry run answers is the pod the first deploy of the spec creates, the
// driver's own settings (termination grace, node selector, annotations) included: both
// are rendered by one function (issue 22: the answer showed a grace of 0 where a deploy
// set 30 s).
func TestDryRunRendersTheDeploy(t *testing.T) {
	cs := readyClient(t, "127.1.0.9")
	var created []*corev1.Pod
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if ca := a.(k8stesting.CreateActionImpl); len(ca.CreateOptions.DryRun) == 0 {
			created = append(created, ca.GetObject().(*corev1.Pod).DeepCopy())
		}
		return false, nil, nil
	})
	k := mustKube(t, cs, func(c *Config) {
		c.DeleteGrace = 7 * time.Second
		c.NodeSelector = map[string]string{"pool": "agents"}
		c.PodAnnotations = map[string]string{"mesh.example/inject": "false"}
		c.Clock = fixedClock{time.UnixMilli(1_700_000_000_000)}
		c.DisableNodeWatch = true
	})
	ctx := context.Background()
	spec := runtimeClassSpec(t, "gvisor")
	answer, err := k.DryRun(ctx, "s", spec)
	if err != nil {
		t.Fatal(err)
	}
	dry, ok := answer.(*corev1.Pod)
	if !ok {
		t.Fatalf("dry run answered %T, want *corev1.Pod", answer)
	}
	if g := dry.Spec.TerminationGracePeriodSeconds; g == nil || *g != 7 || dry.Spec.NodeSelector["pool"] != "agents" ||
		dry.Annotations["mesh.example/inject"] != "false" {
		t.Fatalf("dry-run pod %+v lacks the driver's settings", dry)
	}
	if _, err := k.Deploy(ctx, warmpool.DeployRequest{ScopeID: "s", DeployVer: spec.DeployVer(), Fence: 1, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	if len(created) != 1 {
		t.Fatalf("the deploy created %d pods", len(created))
	}
	if !equality.Semantic.DeepEqual(dry, created[0]) {
		t.Errorf("the dry run answered\n%+v\nthe deploy created\n%+v", dry, created[0])
	}
}

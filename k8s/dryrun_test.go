package k8s

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/warmpool/warmpool"
)

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
	spec := specOf(t, `{"pod_template":{"spec":{"runtimeClassName":"gvisor","containers":[{"name":"agent"}]}}}`)
	if err := k.DryRun(ctx, "s", spec); err != nil {
		t.Fatalf("an accepted pod: %v", err)
	}
	if len(created) != 1 || created[0].Namespace != "wp" || *created[0].Spec.RuntimeClassName != "gvisor" {
		t.Fatalf("created %v: want the rendered pod in the driver's namespace", created)
	}
	err := k.DryRun(ctx, "s", specOf(t, `{"pod_template":{"spec":{"runtimeClassName":"nosuch","containers":[{"name":"agent"}]}}}`))
	if warmpool.ErrorCode(err) != warmpool.CodeValidation || !strings.Contains(err.Error(), `RuntimeClass "nosuch" not found`) {
		t.Errorf("refused pod: %v, want VALIDATION with the server's message", err)
	}
	err = k.DryRun(ctx, "s", specOf(t, `{"pod_template":{"spec":{"runtimeClassName":"down","containers":[{"name":"agent"}]}}}`))
	var e *warmpool.Error
	if !errors.As(err, &e) || e.Code != warmpool.CodeStoreUnavailable || e.RetryAfter < 1 || strings.Contains(e.Message, "10.0.0.1") {
		t.Errorf("unreachable server: %v, want a retryable STORE_UNAVAILABLE without the server's address", err)
	}
}

//go:build e2e_k8s

package k8s_e2e

import (
	"context"
	"strings"
	"testing"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/warmpool/warmpool"
)

// The server-side dry run of a pod template (SPEC §11.1) on a real kube-apiserver: a
// pod the cluster admits creates nothing, an unknown runtime class is refused with the
// API server's own message.
func TestDryRunOnAPIServer(t *testing.T) {
	ctx := context.Background()
	ns := mustNamespace(t)
	d := mustDriver(t, admin, ns, nil)
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-gvisor"}, Handler: "runsc"}
	if _, err := admin.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.NodeV1().RuntimeClasses().Delete(context.Background(), rc.Name, metav1.DeleteOptions{})
	})
	spec := func(runtimeClass string) warmpool.DeploySpec {
		cfg, err := warmpool.LoadScopeConfig([]byte(`{"deploy":{"pod_template":{"spec":{"runtimeClassName":"` + runtimeClass +
			`","tolerations":[{"key":"pool","operator":"Equal","value":"agents","effect":"NoSchedule"}],"containers":[{"name":"agent"}]}}}}`))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Deploy
	}
	if err := d.DryRun(ctx, "dry", spec("e2e-gvisor")); err != nil {
		t.Fatalf("an admitted pod: %v", err)
	}
	if pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Fatalf("a dry run left pods %v (%v)", pods, err)
	}
	err := d.DryRun(ctx, "dry", spec("nosuch"))
	if warmpool.ErrorCode(err) != warmpool.CodeValidation || !strings.Contains(err.Error(), `RuntimeClass "nosuch" not found`) {
		t.Errorf("unknown runtime class: %v, want VALIDATION with the API server's message", err)
	}
	// A namespace quota is refused the same way, once the quota controller has counted
	// it; the rig runs no controller manager, so that case is not tried here.
}

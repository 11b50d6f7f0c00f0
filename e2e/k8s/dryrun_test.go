//go:build e2e_k8s

package k8s_e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/k8s"
)

// The server-side dry run of a pod template (SPEC §11.1) on a real kube-apiserver: a
// pod the cluster admits creates nothing and is answered as a deploy would create it;
// an unknown runtime class, a missing service account and a namespace quota are
// refused with the API server's own message.
func TestDryRunOnAPIServer(t *testing.T) {
	ctx := context.Background()
	ns := mustNamespace(t)
	d := mustDriver(t, admin, ns, func(c *k8s.Config) { c.DeleteGrace = 9 * time.Second })
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-gvisor"}, Handler: "runsc"}
	if _, err := admin.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.NodeV1().RuntimeClasses().Delete(context.Background(), rc.Name, metav1.DeleteOptions{})
	})
	spec := func(runtimeClass, serviceAccount string) warmpool.DeploySpec {
		sa := ""
		if serviceAccount != "" {
			sa = `"serviceAccountName":"` + serviceAccount + `",`
		}
		cfg, err := warmpool.LoadScopeConfig([]byte(`{"deploy":{"pod_template":{"spec":{` + sa + `"runtimeClassName":"` + runtimeClass +
			`","tolerations":[{"key":"pool","operator":"Equal","value":"agents","effect":"NoSchedule"}],"containers":[{"name":"agent"}]}}}}`))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Deploy
	}
	refused := func(what string, s warmpool.DeploySpec, want string) {
		t.Helper()
		_, err := d.DryRun(ctx, "dry", s)
		if warmpool.ErrorCode(err) != warmpool.CodeValidation || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want VALIDATION with the API server's message %q", what, err, want)
		}
	}
	answer, err := d.DryRun(ctx, "dry", spec("e2e-gvisor", ""))
	if err != nil {
		t.Fatalf("an admitted pod: %v", err)
	}
	if pod, _ := answer.(*corev1.Pod); pod == nil || pod.Spec.TerminationGracePeriodSeconds == nil || *pod.Spec.TerminationGracePeriodSeconds != 9 {
		t.Errorf("dry run answered %+v, want the pod with the driver's termination grace of 9 s", answer)
	}
	if pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Fatalf("a dry run left pods %v (%v)", pods, err)
	}
	refused("unknown runtime class", spec("nosuch", ""), `RuntimeClass "nosuch" not found`)

	// The rig runs the ServiceAccount admission plugin, which looks the pod's service
	// account up.
	refused("missing service account", spec("e2e-gvisor", "nosuch-sa"), `serviceaccount "nosuch-sa" not found`)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent-sa"}}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DryRun(ctx, "dry", spec("e2e-gvisor", "agent-sa")); err != nil {
		t.Errorf("an existing service account: %v", err)
	}

	// ResourceQuota admission runs in the API server, but it enforces only what the
	// quota's status says is hard and used, which the controller manager's quota
	// controller writes. The rig runs none, so the test writes that status as the
	// controller would, for a quota of no pods at all.
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-pods"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	q, err = admin.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}
	if _, err := admin.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The admission plugin reads quotas from its informer, which sees the status a
	// moment after the update: until then it admits the pod.
	want := "exceeded quota: no-pods, requested: pods=1, used: pods=0, limited: pods=0"
	eventually(t, 10*time.Second, "the quota refuses the dry run", func() (bool, string) {
		_, err := d.DryRun(ctx, "dry", spec("e2e-gvisor", ""))
		return warmpool.ErrorCode(err) == warmpool.CodeValidation && strings.Contains(err.Error(), want), fmt.Sprint(err)
	})
}

package manifests

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestDecode: every kind deploy/ renders decodes into its typed object; any other kind
// is an error naming its document.
func TestDecode(t *testing.T) {
	objs, err := Decode([]byte(`apiVersion: v1
kind: Namespace
metadata: {name: wp}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: warmpool}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {WARMPOOL_PREFIX: "wp:"}
---
apiVersion: v1
kind: Service
metadata: {name: warmpool}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: warmpool}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: warmpool}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: warmpool}
spec: {replicas: 3}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: warmpool}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: warmpool}
spec: {policyTypes: [Ingress]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 9 {
		t.Fatalf("%d objects, want 9", len(objs))
	}
	for i, ok := range []bool{
		is[*corev1.Namespace](objs[0]), is[*corev1.ServiceAccount](objs[1]), is[*corev1.ConfigMap](objs[2]),
		is[*corev1.Service](objs[3]), is[*rbacv1.Role](objs[4]), is[*rbacv1.RoleBinding](objs[5]),
		is[*appsv1.Deployment](objs[6]), is[*policyv1.PodDisruptionBudget](objs[7]), is[*networkingv1.NetworkPolicy](objs[8]),
	} {
		if !ok {
			t.Errorf("object %d is a %T", i, objs[i])
		}
	}
	if d, ok := objs[6].(*appsv1.Deployment); !ok || d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("deployment %+v", objs[6])
	}

	for _, tc := range []struct{ apiVersion, kind string }{
		{"batch/v1", "Job"},
		{"monitoring.coreos.com/v1", "PrometheusRule"},
	} {
		doc := "apiVersion: " + tc.apiVersion + "\nkind: " + tc.kind + "\nmetadata: {name: x}\n"
		_, err := Decode([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\n" + doc))
		if err == nil || !strings.Contains(err.Error(), "apiVersion: "+tc.apiVersion) || !strings.Contains(err.Error(), `"`+tc.kind+`"`) {
			t.Errorf("%s: err %v; want one naming the document and the kind", tc.kind, err)
		}
	}
}

func is[T any](obj any) bool {
	_, ok := obj.(T)
	return ok
}

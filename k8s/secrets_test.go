package k8s

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/warmpool/warmpool"
)

// A secret ref is read in the pod's namespace (the driver's own when the pod names
// none); a secret or key that is not there, and a secret warmpool may not read, are
// VALIDATION errors that name them.
func TestReadSecretInThePodsNamespace(t *testing.T) {
	cs := newFakeClient(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "db"}, Data: map[string][]byte{"password": []byte("hunter2")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "wp", Name: "db"}, Data: map[string][]byte{"password": []byte("default-ns")}},
	)
	cs.PrependReactor("get", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "locked" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "locked", nil)
		}
		return false, nil, nil
	})
	k := mustKube(t, cs, nil)
	ctx := context.Background()
	team := warmpool.Pod{ID: "p", Namespace: "team"}
	if v, err := k.ReadSecret(ctx, team, "db", "password"); err != nil || v != "hunter2" {
		t.Fatalf("db/password in team: %q %v", v, err)
	}
	if v, err := k.ReadSecret(ctx, warmpool.Pod{ID: "p"}, "db", "password"); err != nil || v != "default-ns" {
		t.Fatalf("db/password of a pod without a namespace: %q %v, want the driver's namespace's", v, err)
	}
	for _, c := range []struct{ secret, key string }{{"nope", "password"}, {"db", "nokey"}, {"locked", "x"}} {
		if v, err := k.ReadSecret(ctx, team, c.secret, c.key); warmpool.ErrorCode(err) != warmpool.CodeValidation || v != "" {
			t.Errorf("%s/%s: %q %v, want VALIDATION", c.secret, c.key, v, err)
		}
	}
}

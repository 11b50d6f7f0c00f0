//go:build e2e_k8s

package k8s_e2e

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/warmpool/warmpool/internal/manifests"
)

// warnings collects the warnings the API server sends, such as Pod Security
// violations.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// TestManifestsDryRun: what deploy/overlays/example renders passes the real
// kube-apiserver's schema validation and admission without creating anything, the way
// `kubectl apply --dry-run=server -k` checks it: every object is applied with
// dryRun=All, after the overlay's namespace is created for real (a namespaced object
// cannot be checked in a namespace that does not exist). The namespace asks for Pod
// Security warnings at the restricted level, so the Deployment's pod template must
// draw none.
func TestManifestsDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, file, _, _ := runtime.Caller(0)
	out, err := manifests.Render(ctx, filepath.Join(filepath.Dir(file), "..", "..", "deploy", "overlays", "example"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := manifests.Documents(out)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(doc), len(doc)).Decode(&u.Object); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, u)
	}

	warn := &warnings{}
	cfg := rest.CopyConfig(adminCfg)
	cfg.WarningHandler = warn
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(admin.Discovery()))
	resource := func(u *unstructured.Unstructured) dynamic.ResourceInterface {
		t.Helper()
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			return dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		return dyn.Resource(m.Resource)
	}
	apply := func(u *unstructured.Unstructured, dryRun bool) error {
		opts := metav1.ApplyOptions{FieldManager: "warmpool-e2e", Force: true}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := resource(u).Apply(ctx, u.GetName(), u, opts)
		return err
	}

	// The namespace first, for real.
	var ns string
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			ns = u.GetName()
			if err := apply(u, false); err != nil {
				t.Fatalf("create namespace %s: %v", ns, err)
			}
		}
	}
	if ns == "" {
		t.Fatal("the overlay renders no Namespace")
	}
	kinds := map[string]bool{}
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			continue
		}
		kinds[u.GetKind()] = true
		if err := apply(u, true); err != nil {
			t.Errorf("dry-run apply of %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		for _, w := range warn.take() {
			t.Errorf("%s %s: the API server warns: %s", u.GetKind(), u.GetName(), w)
		}
	}
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget"} {
		if !kinds[kind] {
			t.Errorf("the overlay renders no %s", kind)
		}
	}

	// A dry run creates nothing.
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			continue
		}
		if _, err := resource(u).Get(ctx, u.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s %s exists after the dry run (%v)", u.GetKind(), u.GetName(), err)
		}
	}

	// And the check is real: the same Deployment with a bad field is refused, and one
	// whose container may run as root draws a Pod Security warning.
	for _, u := range objs {
		if u.GetKind() != "Deployment" {
			continue
		}
		bad := u.DeepCopy()
		if err := unstructured.SetNestedField(bad.Object, int64(-1), "spec", "replicas"); err != nil {
			t.Fatal(err)
		}
		if err := apply(bad, true); !apierrors.IsInvalid(err) {
			t.Errorf("dry-run apply of a Deployment with replicas -1: %v, want Invalid", err)
		}
		root := u.DeepCopy()
		containers, _, _ := unstructured.NestedSlice(root.Object, "spec", "template", "spec", "containers")
		unstructured.RemoveNestedField(containers[0].(map[string]any), "securityContext")
		if err := unstructured.SetNestedSlice(root.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
		if err := apply(root, true); err != nil {
			t.Fatal(err)
		}
		if w := strings.Join(warn.take(), "\n"); !strings.Contains(w, "restricted") {
			t.Errorf("a container without its securityContext drew no Pod Security warning (%q): the namespace's check is not on", w)
		}
	}
}

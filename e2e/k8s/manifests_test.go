//go:build e2e_k8s

package k8s_e2e

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/manifests"
	"github.com/warmpool/warmpool/podpolicy"
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

// rig applies objects on the rig's API server as `kubectl apply --dry-run=server`
// does, collecting the warnings it sends.
type rig struct {
	t      *testing.T
	ctx    context.Context
	dyn    dynamic.Interface
	cs     kubernetes.Interface
	mapper meta.RESTMapper
	warn   *warnings
}

func newRig(t *testing.T, ctx context.Context) *rig {
	t.Helper()
	warn := &warnings{}
	cfg := rest.CopyConfig(adminCfg)
	cfg.WarningHandler = warn
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, ctx: ctx, dyn: dyn, cs: cs, warn: warn,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(admin.Discovery()))}
}

// objects decodes rendered YAML into unstructured objects.
func objects(t *testing.T, out []byte) []*unstructured.Unstructured {
	t.Helper()
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
	return objs
}

func (r *rig) resource(u *unstructured.Unstructured) dynamic.ResourceInterface {
	r.t.Helper()
	gvk := u.GroupVersionKind()
	m, err := r.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		r.t.Fatalf("%s: %v", gvk, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return r.dyn.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	return r.dyn.Resource(m.Resource)
}

func (r *rig) apply(u *unstructured.Unstructured, dryRun bool) error {
	opts := metav1.ApplyOptions{FieldManager: "warmpool-e2e", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err := r.resource(u).Apply(r.ctx, u.GetName(), u, opts)
	return err
}

// dryRun creates the namespaces of objs and those of extra for real (a namespaced
// object cannot be checked in a namespace that does not exist), then applies every
// other object with dryRun=All, failing the test on any refusal or warning, and
// checks that the dry run created none of them. It answers the kinds applied.
func (r *rig) dryRun(objs []*unstructured.Unstructured, extra ...string) map[string]bool {
	t := r.t
	t.Helper()
	for _, name := range extra {
		if _, err := admin.CoreV1().Namespaces().Create(r.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create namespace %s: %v", name, err)
		}
	}
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			if err := r.apply(u, false); err != nil {
				t.Fatalf("create namespace %s: %v", u.GetName(), err)
			}
		}
	}
	kinds := map[string]bool{}
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			continue
		}
		kinds[u.GetKind()] = true
		if err := r.apply(u, true); err != nil {
			t.Errorf("dry-run apply of %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
		for _, w := range r.warn.take() {
			t.Errorf("%s %s: the API server warns: %s", u.GetKind(), u.GetName(), w)
		}
	}
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			continue
		}
		if _, err := r.resource(u).Get(r.ctx, u.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s %s exists after the dry run (%v)", u.GetKind(), u.GetName(), err)
		}
	}
	return kinds
}

// deployKinds are the kinds of deploy/base, which the overlay and the chart render
// besides their namespaces.
var deployKinds = []string{"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"}

// TestManifestsDryRun: what deploy/overlays/example renders passes the real
// kube-apiserver's schema validation and admission without creating anything, the way
// `kubectl apply --dry-run=server -k` checks it, after its namespaces are created for
// real. The namespaces ask for Pod Security warnings at the restricted level, so the
// Deployment's pod template must draw none; the agents' namespace enforces that
// level, and admits the agent pod warmpool renders.
func TestManifestsDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, file, _, _ := runtime.Caller(0)
	out, err := manifests.Render(ctx, filepath.Join(filepath.Dir(file), "..", "..", "deploy", "overlays", "example"))
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, out)
	r := newRig(t, ctx)
	kinds := r.dryRun(objs)
	for _, kind := range deployKinds {
		if !kinds[kind] {
			t.Errorf("the overlay renders no %s", kind)
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
		if err := r.apply(bad, true); !apierrors.IsInvalid(err) {
			t.Errorf("dry-run apply of a Deployment with replicas -1: %v, want Invalid", err)
		}
		root := u.DeepCopy()
		containers, _, _ := unstructured.NestedSlice(root.Object, "spec", "template", "spec", "containers")
		unstructured.RemoveNestedField(containers[0].(map[string]any), "securityContext")
		if err := unstructured.SetNestedSlice(root.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
		if err := r.apply(root, true); err != nil {
			t.Fatal(err)
		}
		if w := strings.Join(r.warn.take(), "\n"); !strings.Contains(w, "restricted") {
			t.Errorf("a container without its securityContext drew no Pod Security warning (%q): the namespace's check is not on", w)
		}
	}
	agentPodAdmitted(t, r, objs)
}

// agentPodAdmitted: the agents' namespace of objs (the one WARMPOOL_NAMESPACE names)
// admits the pod warmpool renders for the default scope config, with no warning,
// and refuses one that breaks the restricted level it enforces.
func agentPodAdmitted(t *testing.T, r *rig, objs []*unstructured.Unstructured) {
	t.Helper()
	var agents string
	for _, u := range objs {
		if u.GetKind() == "ConfigMap" {
			agents, _, _ = unstructured.NestedString(u.Object, "data", "WARMPOOL_NAMESPACE")
		}
	}
	if agents == "" {
		t.Fatal("no ConfigMap sets WARMPOOL_NAMESPACE")
	}
	// No controller manager runs on the rig to create the namespace's default
	// ServiceAccount, which the agent pod runs as.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := admin.CoreV1().ServiceAccounts(agents).Create(r.ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p, err := podpolicy.New(podpolicy.Config{Namespace: agents})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := p.Pod(r.ctx, "manifests", warmpool.DefaultScopeConfig().Deploy)
	if err != nil {
		t.Fatal(err)
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := r.cs.CoreV1().Pods(agents).Create(r.ctx, pod, dry); err != nil {
		t.Errorf("the agent pod in %s: %v", agents, err)
	}
	for _, w := range r.warn.take() {
		t.Errorf("the agent pod in %s: the API server warns: %s", agents, w)
	}
	root := pod.DeepCopy()
	root.Spec.Containers[0].SecurityContext = nil
	if _, err := r.cs.CoreV1().Pods(agents).Create(r.ctx, root, dry); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
		t.Errorf("an agent pod that may run as root in %s: %v, want it forbidden by the restricted level", agents, err)
	}
}

// TestChartDryRun: what the Helm chart renders (deploy/helm/warmpool, with the
// listeners and policy values set) passes the real kube-apiserver's validation and
// admission as `helm install --dry-run=server` would check it: the release's
// namespace created for real (helm install --create-namespace), the chart's own
// namespace too, every other object with dryRun=All, no refusal and no warning; its
// agents' namespace admits the agent pod warmpool renders.
func TestChartDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, file, _, _ := runtime.Caller(0)
	const ns = "wp-chart"
	out, err := manifests.RenderChart(ctx, filepath.Join(filepath.Dir(file), "..", "..", "deploy", "helm", "warmpool"), "warmpool", ns,
		[]byte("metrics: {port: 9090}\ne2b: {port: 3000}\npolicy: {imagePrefixes: [registry.example/], maxPodCPU: \"4\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	objs := objects(t, out)
	r := newRig(t, ctx)
	kinds := r.dryRun(objs, ns)
	for _, kind := range deployKinds {
		if !kinds[kind] {
			t.Errorf("the chart renders no %s", kind)
		}
	}
	if !slices.ContainsFunc(objs, func(u *unstructured.Unstructured) bool { return u.GetKind() == "Namespace" }) {
		t.Error("the chart renders no Namespace for the agents")
	}
	agentPodAdmitted(t, r, objs)
}

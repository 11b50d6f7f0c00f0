// The kustomize base and the example overlay render, and what they render is what an
// operator of a multi-replica service needs: least privilege, probes on the right
// paths, a hardened pod, replicas spread out and drained gracefully, secrets only by
// reference, agent pods in a namespace of their own, fenced by NetworkPolicies.
package deploy

import (
	"cmp"
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/warmpool/warmpool/internal/testing/manifests"
)

// rendered is one rendering of the deployment: one object of each kind but
// Namespace and NetworkPolicy, which are kept by name.
type rendered struct {
	objs       []runtime.Object
	namespaces map[string]*corev1.Namespace
	sa         *corev1.ServiceAccount
	role       *rbacv1.Role
	binding    *rbacv1.RoleBinding
	cm         *corev1.ConfigMap
	dep        *appsv1.Deployment
	svc        *corev1.Service
	pdb        *policyv1.PodDisruptionBudget
	netpols    map[string]*networkingv1.NetworkPolicy
}

// duration is a duration setting of the ConfigMap, which must set it.
func (r rendered) duration(t *testing.T, name string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(r.cm.Data[name])
	if err != nil {
		t.Errorf("ConfigMap %s=%q: %v", name, r.cm.Data[name], err)
	}
	return d
}

// render renders a kustomize directory.
func render(t *testing.T, dir string) rendered {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := manifests.Render(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	return decoded(t, dir, out)
}

// decoded sorts what src rendered (out) into a rendered.
func decoded(t *testing.T, src string, out []byte) rendered {
	t.Helper()
	objs, err := manifests.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{objs: objs, namespaces: map[string]*corev1.Namespace{}, netpols: map[string]*networkingv1.NetworkPolicy{}}
	count := map[string]int{}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.Namespace:
			r.namespaces[o.Name] = o
			continue
		case *networkingv1.NetworkPolicy:
			r.netpols[o.Name] = o
			continue
		}
		kind := obj.GetObjectKind().GroupVersionKind().Kind
		count[kind]++
		if !(into(&r.sa, obj) || into(&r.role, obj) || into(&r.binding, obj) ||
			into(&r.cm, obj) || into(&r.dep, obj) || into(&r.svc, obj) || into(&r.pdb, obj)) {
			// Nothing cluster-wide (no ClusterRole, no ClusterRoleBinding) and
			// nothing unexpected.
			t.Errorf("%s renders a %s: not part of the deployment", src, obj.GetObjectKind().GroupVersionKind())
		}
	}
	for kind, n := range count {
		if n > 1 {
			t.Errorf("%s renders %d objects of kind %s, want one", src, n, kind)
		}
	}
	if r.sa == nil || r.role == nil || r.binding == nil || r.cm == nil || r.dep == nil || r.svc == nil || r.pdb == nil {
		t.Fatalf("%s is missing an object: %+v", src, r)
	}
	return r
}

// into stores obj in *field when obj is of the field's type, and says whether it was.
func into[T any](field *T, obj any) bool {
	o, ok := obj.(T)
	if ok {
		*field = o
	}
	return ok
}

// The base's namespaces: warmpool's own and the agents'.
const (
	baseNamespace   = "warmpool"
	agentsNamespace = "warmpool-agents"
)

func TestBase(t *testing.T) {
	r := render(t, "base")
	check(t, r)
	if ns, agents := r.dep.Namespace, r.role.Namespace; ns != baseNamespace || agents != agentsNamespace {
		t.Errorf("namespaces %q and %q, want %q and %q", ns, agents, baseNamespace, agentsNamespace)
	}
	if r.namespaces[baseNamespace] == nil {
		t.Errorf("the base does not create warmpool's namespace %s", baseNamespace)
	}
	if img := r.dep.Spec.Template.Spec.Containers[0].Image; img != "localhost/warmpool:dev" {
		t.Errorf("base image %q, want localhost/warmpool:dev (what make image builds)", img)
	}
}

func TestExampleOverlay(t *testing.T) {
	r := render(t, "overlays/example")
	check(t, r)
	if img := r.dep.Spec.Template.Spec.Containers[0].Image; !strings.HasPrefix(img, "registry.example/") {
		t.Errorf("overlay image %q: the overlay names its registry's image", img)
	}
}

// check asserts what every rendering must hold: warmpool's objects in one namespace,
// the agents' Role, RoleBinding and NetworkPolicy in another (the agents' namespace,
// which it creates, labelled to enforce the restricted Pod Security Standard, as
// warmpool's own when it creates that too).
func check(t *testing.T, r rendered) {
	t.Helper()
	ns, agents := r.dep.Namespace, r.role.Namespace
	if ns == "" || agents == "" || ns == agents {
		t.Fatalf("warmpool in namespace %q, its Role in %q: want two namespaces, named", ns, agents)
	}
	for _, m := range []metav1.Object{r.sa, r.cm, r.dep, r.svc, r.pdb} {
		if m.GetNamespace() != ns {
			t.Errorf("%s is in namespace %q, want warmpool's %q", m.GetName(), m.GetNamespace(), ns)
		}
	}
	if r.binding.Namespace != agents {
		t.Errorf("the RoleBinding is in namespace %q, want the agents' %q", r.binding.Namespace, agents)
	}
	if r.namespaces[agents] == nil {
		t.Errorf("the agents' namespace %s is not created", agents)
	}
	// The agents' namespace enforces the level scopes are held to (--pod-security,
	// default restricted); warmpool's pods meet restricted.
	level := cmp.Or(r.cm.Data["WARMPOOL_POD_SECURITY"], "restricted")
	for name, n := range r.namespaces {
		want := map[string]string{ns: "restricted", agents: level}[name]
		if want == "" {
			t.Errorf("namespace %s: neither warmpool's nor the agents'", name)
		}
		if l := n.Labels["pod-security.kubernetes.io/enforce"]; l != want {
			t.Errorf("namespace %s enforces Pod Security %q, want %q", name, l, want)
		}
	}
	if got := r.cm.Data["WARMPOOL_NAMESPACE"]; got != agents {
		t.Errorf("WARMPOOL_NAMESPACE = %q: agent pods must go to the agents' namespace %s", got, agents)
	}

	// RBAC: two namespaced rules, exactly the driver's verbs on pods and get (alone:
	// no list, no watch) on secrets, for session configs' secret refs.
	wants := []struct {
		resource string
		verbs    []string
	}{{"pods", []string{"create", "delete", "get", "list", "watch"}}, {"secrets", []string{"get"}}}
	if len(r.role.Rules) != len(wants) {
		t.Fatalf("role has %d rules, want %d: %+v", len(r.role.Rules), len(wants), r.role.Rules)
	}
	for i, want := range wants {
		rule := r.role.Rules[i]
		verbs := slices.Sorted(slices.Values(rule.Verbs))
		if !slices.Equal(rule.APIGroups, []string{""}) || !slices.Equal(rule.Resources, []string{want.resource}) ||
			!slices.Equal(verbs, want.verbs) || len(rule.ResourceNames) > 0 || len(rule.NonResourceURLs) > 0 {
			t.Errorf("role rule %+v, want %s in the core group with verbs %v", rule, want.resource, want.verbs)
		}
	}
	if ref := r.binding.RoleRef; ref.Kind != "Role" || ref.Name != r.role.Name || ref.APIGroup != rbacv1.GroupName {
		t.Errorf("role binding refers to %+v, want Role %s", ref, r.role.Name)
	}
	if len(r.binding.Subjects) != 1 {
		t.Fatalf("role binding has subjects %+v, want the one ServiceAccount", r.binding.Subjects)
	}
	if sub := r.binding.Subjects[0]; sub.Kind != rbacv1.ServiceAccountKind || sub.Name != r.sa.Name || sub.Namespace != ns {
		t.Errorf("role binding subject %+v, want ServiceAccount %s of namespace %q", sub, r.sa.Name, ns)
	}

	// The Deployment.
	dep := r.dep
	pod := dep.Spec.Template.Spec
	podLabels := labels.Set(dep.Spec.Template.Labels)
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", dep.Spec.Replicas)
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil || !sel.Matches(podLabels) {
		t.Errorf("deployment selector %v does not select its pods %v (%v)", dep.Spec.Selector, podLabels, err)
	}
	if ru := dep.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("rolling update %+v: want maxUnavailable 0, no replica down before its successor is ready", ru)
	}
	if pod.ServiceAccountName != r.sa.Name {
		t.Errorf("pods run as service account %q, want %q", pod.ServiceAccountName, r.sa.Name)
	}
	// The shutdown the binary runs on SIGTERM, as the ConfigMap sets it: the pod's
	// grace period must outlast both stages.
	drainDelay, shutdownGrace := r.duration(t, "WARMPOOL_DRAIN_DELAY"), r.duration(t, "WARMPOOL_SHUTDOWN_GRACE")
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= drainDelay+shutdownGrace {
		t.Errorf("terminationGracePeriodSeconds %v: must exceed the drain delay %v + shutdown grace %v", g, drainDelay, shutdownGrace)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil ||
		psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot, user 65532 (the image's), seccomp RuntimeDefault", psc)
	}
	spread := map[string]bool{}
	for _, c := range pod.TopologySpreadConstraints {
		s, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil || !s.Matches(podLabels) {
			t.Errorf("topology spread on %s does not select the replicas: %v", c.TopologyKey, c.LabelSelector)
		}
		spread[c.TopologyKey] = true
	}
	if !spread[corev1.LabelHostname] {
		t.Errorf("replicas are not spread over nodes (%s): %+v", corev1.LabelHostname, pod.TopologySpreadConstraints)
	}

	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	csc := c.SecurityContext
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
		csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
		csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") || len(csc.Capabilities.Add) > 0 ||
		(csc.Privileged != nil && *csc.Privileged) {
		t.Errorf("container securityContext %+v: want a read-only root, no privilege escalation, every capability dropped", csc)
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[res]; !ok || q.IsZero() {
			t.Errorf("no %s request", res)
		}
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok || q.Cmp(c.Resources.Requests[corev1.ResourceMemory]) < 0 {
		t.Errorf("memory limit %v, want one at least the request", c.Resources.Limits)
	}

	// Probes on the paths SPEC §3 gives them, on the container's HTTP port.
	port := containerPort(t, c, "http")
	probe := func(name string, p *corev1.Probe, path string) {
		t.Helper()
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", name)
			return
		}
		if p.HTTPGet.Path != path || resolvePort(c, p.HTTPGet.Port.String()) != port {
			t.Errorf("%s probe %s on port %s, want %s on %d", name, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, port)
		}
	}
	probe("readiness", c.ReadinessProbe, "/readyz")
	probe("liveness", c.LivenessProbe, "/healthz")

	// Settings: the ConfigMap; secrets: only by reference to a Secret.
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != r.cm.Name {
		t.Errorf("envFrom %+v, want the ConfigMap %s", c.EnvFrom, r.cm.Name)
	}
	if got := r.cm.Data["WARMPOOL_DRIVER"]; got != "kubernetes" {
		t.Errorf("WARMPOOL_DRIVER = %q, want kubernetes", got)
	}
	if listen := r.cm.Data["WARMPOOL_LISTEN"]; !strings.HasSuffix(listen, ":"+strconv.Itoa(port)) || strings.HasPrefix(listen, "127.") {
		t.Errorf("WARMPOOL_LISTEN = %q: want every interface on the container port %d", listen, port)
	}
	secret := map[string]bool{"WARMPOOL_REDIS": true, "WARMPOOL_STORE": true, "WARMPOOL_AUTH_TOKEN": true, "WARMPOOL_ADMIN_TOKEN": true}
	for name := range secret {
		if _, ok := r.cm.Data[name]; ok {
			t.Errorf("%s is in the ConfigMap: it holds a credential, so it belongs in a Secret", name)
		}
	}
	for _, e := range c.Env {
		if !secret[e.Name] {
			continue
		}
		delete(secret, e.Name)
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name == "" {
			t.Errorf("%s is not taken from a Secret: %+v", e.Name, e)
		}
	}
	for name := range secret {
		t.Errorf("%s is not set", name)
	}

	// The Service and the PodDisruptionBudget select the replicas.
	if !labels.SelectorFromSet(r.svc.Spec.Selector).Matches(podLabels) || len(r.svc.Spec.Selector) == 0 {
		t.Errorf("service selector %v does not select the replicas %v", r.svc.Spec.Selector, podLabels)
	}
	// Its first port, named http, is the container's; any other reaches a port of the
	// container too.
	if len(r.svc.Spec.Ports) == 0 {
		t.Fatal("the Service has no port")
	}
	for i, p := range r.svc.Spec.Ports {
		if target := resolvePort(c, p.TargetPort.String()); target < 0 || (i == 0) != (p.Name == "http" && target == port) {
			t.Errorf("service ports %+v, want the first, http, to the container's http port, every other to a port of the container", r.svc.Spec.Ports)
		}
	}
	pdbSel, err := metav1.LabelSelectorAsSelector(r.pdb.Spec.Selector)
	if err != nil || !pdbSel.Matches(podLabels) {
		t.Errorf("PDB selector %v does not select the replicas", r.pdb.Spec.Selector)
	}
	if mu := r.pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 {
		t.Errorf("PDB maxUnavailable %v, want 1: a drain takes one replica at a time", mu)
	}

	// Agents report to the Service, by a name that resolves from their namespace.
	report, err := url.Parse(r.cm.Data["WARMPOOL_REPORT_URL"])
	if want := r.svc.Name + "." + ns + ".svc"; err != nil || strings.TrimSuffix(report.Hostname(), ".cluster.local") != want ||
		(report.Port() != "" && report.Port() != strconv.Itoa(int(r.svc.Spec.Ports[0].Port))) {
		t.Errorf("WARMPOOL_REPORT_URL = %q, want the Service http://%s from the agents' namespace", r.cm.Data["WARMPOOL_REPORT_URL"], want)
	}
	checkNetworkPolicies(t, r)
}

func containerPort(t *testing.T, c corev1.Container, name string) int {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	t.Fatalf("container %s has no port named %s", c.Name, name)
	return 0
}

// resolvePort turns a probe's or Service's port (a name or a number) into the
// container's port number.
func resolvePort(c corev1.Container, port string) int {
	for _, p := range c.Ports {
		if p.Name == port || strconv.Itoa(int(p.ContainerPort)) == port {
			return int(p.ContainerPort)
		}
	}
	return -1
}

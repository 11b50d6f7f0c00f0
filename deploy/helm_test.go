// The Helm chart renders what the kustomize base renders (the same objects, RBAC
// rules, pod, probes and settings, so the two cannot drift), passes every check of the
// base's rendering, and turns its values into the serve flags they name.
package deploy

import (
	"bytes"
	"context"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/warmpool/warmpool/internal/testing/manifests"
)

const chartDir = "helm/warmpool"

// helmTemplate is what `helm template RELEASE deploy/helm/warmpool -n NS` renders
// with values over the chart's own.
func helmTemplate(t *testing.T, release, ns, values string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := manifests.RenderChart(ctx, chartDir, release, ns, []byte(values))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// objectKeys names each object by kind, namespace and name, a kustomize ConfigMap
// without the hash of its content, and leaves out the Namespace skip (warmpool's own,
// which the base creates and the chart leaves to helm install --create-namespace).
func objectKeys(objs []runtime.Object, skip string) []string {
	hash := regexp.MustCompile(`-[a-z0-9]{10}$`)
	var keys []string
	for _, obj := range objs {
		m, err := meta.Accessor(obj)
		if err != nil {
			panic(err) // every kind manifests.Decode decodes has object metadata
		}
		kind, name := obj.GetObjectKind().GroupVersionKind().Kind, m.GetName()
		if kind == "ConfigMap" {
			name = hash.ReplaceAllString(name, "")
		}
		if kind == "Namespace" && name == skip {
			continue
		}
		keys = append(keys, kind+" "+m.GetNamespace()+"/"+name)
	}
	slices.Sort(keys)
	return keys
}

// TestChartMatchesBase: with its defaults and release warmpool in namespace warmpool,
// the chart renders the base's objects by kind, namespace and name, the same RBAC,
// the same pod (probes, security contexts, resources, env, ports, grace), the same
// settings and Service and PDB, and passes the base's checks. Nothing of the E2B
// listener or the metrics listener is rendered unless asked for.
func TestChartMatchesBase(t *testing.T) {
	base := render(t, "base")
	chart := decoded(t, chartDir, helmTemplate(t, "warmpool", baseNamespace, ""))
	check(t, chart)
	if b, c := objectKeys(base.objs, baseNamespace), objectKeys(chart.objs, baseNamespace); !slices.Equal(b, c) {
		t.Errorf("the chart renders\n  %s\nthe base\n  %s", strings.Join(c, "\n  "), strings.Join(b, "\n  "))
	}
	same := func(what string, b, c any) {
		t.Helper()
		if !reflect.DeepEqual(b, c) {
			t.Errorf("%s: the chart has %+v, the base %+v", what, c, b)
		}
	}
	same("Role rules", base.role.Rules, chart.role.Rules)
	same("RoleBinding roleRef", base.binding.RoleRef, chart.binding.RoleRef)
	same("RoleBinding subjects", base.binding.Subjects, chart.binding.Subjects)
	same("replicas", base.dep.Spec.Replicas, chart.dep.Spec.Replicas)
	same("rollout", base.dep.Spec.Strategy, chart.dep.Spec.Strategy)
	bp, cp := base.dep.Spec.Template.Spec, chart.dep.Spec.Template.Spec
	same("pod securityContext", bp.SecurityContext, cp.SecurityContext)
	same("terminationGracePeriodSeconds", bp.TerminationGracePeriodSeconds, cp.TerminationGracePeriodSeconds)
	same("ServiceAccount automount", base.sa.AutomountServiceAccountToken, chart.sa.AutomountServiceAccountToken)
	bc, cc := bp.Containers[0], cp.Containers[0]
	for _, f := range []struct {
		what string
		b, c any
	}{
		{"image", bc.Image, cc.Image}, {"args", bc.Args, cc.Args}, {"ports", bc.Ports, cc.Ports},
		{"env", bc.Env, cc.Env}, {"readiness probe", bc.ReadinessProbe, cc.ReadinessProbe},
		{"liveness probe", bc.LivenessProbe, cc.LivenessProbe}, {"resources", bc.Resources, cc.Resources},
		{"container securityContext", bc.SecurityContext, cc.SecurityContext},
	} {
		same("container "+f.what, f.b, f.c)
	}
	for k, v := range base.cm.Data {
		if chart.cm.Data[k] != v {
			t.Errorf("setting %s: the chart has %q, the base %q", k, chart.cm.Data[k], v)
		}
	}
	for _, k := range []string{"WARMPOOL_E2B_LISTEN", "WARMPOOL_METRICS_LISTEN", "WARMPOOL_IMAGE_PREFIXES", "WARMPOOL_MAX_POD_CPU", "WARMPOOL_MAX_POD_MEMORY"} {
		if v, ok := chart.cm.Data[k]; ok {
			t.Errorf("the chart's defaults set %s=%q: it is off unless a value sets it", k, v)
		}
	}
	same("Service ports", base.svc.Spec.Ports, chart.svc.Spec.Ports)
	same("PDB maxUnavailable", base.pdb.Spec.MaxUnavailable, chart.pdb.Spec.MaxUnavailable)
}

// TestChartValues: the values name the release's objects and the agents' namespace,
// set the policy flags, the listeners and the Secrets they read, and what they render
// still passes the base's checks (the NetworkPolicies let Prometheus in on the
// metrics port and the gateways on the E2B port).
func TestChartValues(t *testing.T) {
	r := decoded(t, chartDir, helmTemplate(t, "wp", "platform", `
agents: {namespace: sandboxes}
policy: {podSecurity: baseline, imagePrefixes: [reg.example/a/, reg.example/b/], maxPodCPU: "4", maxPodMemory: 8Gi}
metrics: {port: 9090}
e2b: {port: 3000}
existingSecret: wp-secrets
adminToken: {secret: {name: wp-admin, key: token}}
`))
	check(t, r)
	if r.dep.Name != "wp-warmpool" || r.dep.Namespace != "platform" || r.role.Namespace != "sandboxes" || r.namespaces["sandboxes"] == nil {
		t.Errorf("Deployment %s/%s, Role in %s, namespaces %v: want platform/wp-warmpool and the agents in sandboxes, created",
			r.dep.Namespace, r.dep.Name, r.role.Namespace, slices.Sorted(maps.Keys(r.namespaces)))
	}
	for k, want := range map[string]string{
		"WARMPOOL_POD_SECURITY": "baseline", "WARMPOOL_IMAGE_PREFIXES": "reg.example/a/,reg.example/b/",
		"WARMPOOL_MAX_POD_CPU": "4", "WARMPOOL_MAX_POD_MEMORY": "8Gi",
		"WARMPOOL_METRICS_LISTEN": "0.0.0.0:9090", "WARMPOOL_E2B_LISTEN": "0.0.0.0:3000",
	} {
		if got := r.cm.Data[k]; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	c := r.dep.Spec.Template.Spec.Containers[0]
	if p := namedPorts(r.dep.Spec.Template.Spec); p["metrics"] != 9090 || p["e2b"] != 3000 {
		t.Errorf("container ports %v: want metrics 9090 and e2b 3000", p)
	}
	if !slices.ContainsFunc(r.svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == 3000 && p.TargetPort.String() == "e2b" }) {
		t.Errorf("Service ports %+v: want the E2B port", r.svc.Spec.Ports)
	}
	for name, want := range map[string]string{"WARMPOOL_AUTH_TOKEN": "wp-secrets/auth-token", "WARMPOOL_ADMIN_TOKEN": "wp-admin/token", "WARMPOOL_REDIS": "wp-secrets/redis-url"} {
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
		if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil ||
			c.Env[i].ValueFrom.SecretKeyRef.Name+"/"+c.Env[i].ValueFrom.SecretKeyRef.Key != want {
			t.Errorf("%s: want it from Secret key %s, got %+v", name, want, c.Env)
		}
	}

	// A Redis URL in the clear (no password) replaces its Secret key.
	r = decoded(t, chartDir, helmTemplate(t, "warmpool", "wp", `redis: {url: "redis://redis.wp.svc:6379/0"}`))
	c = r.dep.Spec.Template.Spec.Containers[0]
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "WARMPOOL_REDIS" }); i < 0 || c.Env[i].Value != "redis://redis.wp.svc:6379/0" || c.Env[i].ValueFrom != nil {
		t.Errorf("redis.url set: env %+v, want WARMPOOL_REDIS with its value", c.Env)
	}
}

// TestChartPrometheusRule: the chart's PrometheusRule holds the rule groups of
// deploy/monitoring/prometheusrule.yaml (which the monitoring tests check), rendered
// when asked for, and not by default where the cluster serves no PrometheusRule.
func TestChartPrometheusRule(t *testing.T) {
	rules := func(out []byte) []map[string]any {
		docs, err := manifests.Documents(out)
		if err != nil {
			t.Fatal(err)
		}
		var found []map[string]any
		for _, doc := range docs {
			var obj map[string]any
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				t.Fatal(err)
			}
			if obj["kind"] == "PrometheusRule" {
				found = append(found, obj)
			}
		}
		return found
	}
	if got := rules(helmTemplate(t, "warmpool", "wp", "")); len(got) != 0 {
		t.Errorf("the defaults render a PrometheusRule without the Prometheus Operator's API: %v", got)
	}
	got := rules(helmTemplate(t, "warmpool", "wp", `prometheusRule: {enabled: true, labels: {release: prom}}`))
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0]["spec"], want["spec"]) {
		t.Fatalf("the chart's PrometheusRule %v: want one whose spec is %s's", got, rulesFile)
	}
	meta, _ := got[0]["metadata"].(map[string]any)
	if l, _ := meta["labels"].(map[string]any); meta["namespace"] != "wp" || l["release"] != "prom" {
		t.Errorf("PrometheusRule metadata %v: want the release's namespace and the labels asked for", meta)
	}
}

// TestMakefileHelm: make lint runs the helm these tests render with.
func TestMakefileHelm(t *testing.T) {
	raw, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HELM\s*:?=\s*(\S+)\s*$`).FindSubmatch(raw)
	if m == nil || !bytes.Equal(m[1], []byte(manifests.Helm)) {
		t.Errorf("the Makefile's HELM is %q, want %s (internal/testing/manifests.Helm)", m, manifests.Helm)
	}
}

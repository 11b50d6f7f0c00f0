package warmpool

import (
	"strings"
	"testing"
)

func withTemplate(tb testing.TB, deploy string) (ScopeConfig, error) {
	tb.Helper()
	return LoadScopeConfig([]byte(`{"deploy":` + deploy + `}`))
}

// A template's agent container takes the shorthand's place: what it sets gets no
// default, the same template written two ways has one deploy_ver, and a null template
// is no template.
func TestPodTemplateNormalizes(t *testing.T) {
	a, err := withTemplate(t, `{"pod_template":{"spec":{"runtimeClassName":"gvisor","containers":[{"name":"agent","image":"reg/agent:2","resources":{"requests":{"cpu":"1"}}}]}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if a.Deploy.Image != "" || a.Deploy.Resources != (Resources{}) {
		t.Errorf("image %q, resources %+v: the template sets them, the shorthand must stay empty", a.Deploy.Image, a.Deploy.Resources)
	}
	b, err := withTemplate(t, `{"pod_template":{ "spec" : {"containers":[{"resources":{"requests":{"cpu":"1"}},"image":"reg/agent:2","name":"agent"}],"runtimeClassName":"gvisor"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if a.Deploy.DeployVer() != b.Deploy.DeployVer() {
		t.Errorf("one template written two ways: deploy_ver %s and %s", a.Deploy.DeployVer(), b.Deploy.DeployVer())
	}
	if string(a.Deploy.PodTemplate) != string(b.Deploy.PodTemplate) {
		t.Errorf("templates not canonical:\n%s\n%s", a.Deploy.PodTemplate, b.Deploy.PodTemplate)
	}
	n, err := withTemplate(t, `{"pod_template":null}`)
	if err != nil {
		t.Fatal(err)
	}
	if n.Deploy.PodTemplate != nil || n.Deploy.DeployVer() != DefaultScopeConfig().Deploy.DeployVer() {
		t.Errorf("a null template: %s, deploy_ver %s, want none and the default's", n.Deploy.PodTemplate, n.Deploy.DeployVer())
	}
	c, err := withTemplate(t, `{"pod_template":{"spec":{"containers":[{"name":"agent","env":[{"name":"A","value":"1"},{"name":"K","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}}]}]}}}`)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := c.Deploy.Agent()
	if err != nil || agent.Index != 0 || len(agent.Env) != 1 || agent.Env["A"] != "1" {
		t.Errorf("Agent() = %+v, %v: want container 0 with the plain env A=1 only", agent, err)
	}
	if env := c.Deploy.PlainEnv(); len(env) != 1 || env["A"] != "1" {
		t.Errorf("PlainEnv() = %v: want the template's plain A=1, without the secret", env)
	}
	if c.Deploy.Image != DefaultImage {
		t.Errorf("image %q: a template without one takes the default", c.Deploy.Image)
	}
}

// What warmpool owns, a missing agent container and a field given twice are refused,
// each fault naming its path.
func TestPodTemplateRefuses(t *testing.T) {
	for _, tc := range []struct{ deploy, want string }{
		{`{"pod_template":[]}`, "deploy.pod_template: must be an object"},
		{`{"pod_template":{"spec":{"containers":[{"name":"sidecar"}]}}}`, `deploy.pod_template.spec.containers: no container named "agent"`},
		{`{"container_name":"main","pod_template":{"spec":{"containers":[{"name":"agent"}]}}}`, `no container named "main"`},
		{`{"pod_template":{"metadata":{"name":"x"},"spec":{"containers":[{"name":"agent"}]}}}`, "deploy.pod_template.metadata.name: owned by warmpool"},
		{`{"pod_template":{"metadata":{"generateName":"x-"},"spec":{"containers":[{"name":"agent"}]}}}`, "deploy.pod_template.metadata.generateName: owned by warmpool"},
		{`{"pod_template":{"metadata":{"namespace":"kube-system"},"spec":{"containers":[{"name":"agent"}]}}}`, "deploy.pod_template.metadata.namespace: owned by warmpool: use deploy.namespace"},
		{`{"pod_template":{"metadata":{"ownerReferences":[{}]},"spec":{"containers":[{"name":"agent"}]}}}`, "deploy.pod_template.metadata.ownerReferences: owned by warmpool"},
		{`{"pod_template":{"spec":{"nodeName":"n1","containers":[{"name":"agent"}]}}}`, "deploy.pod_template.spec.nodeName: owned by warmpool"},
		{`{"pod_template":{"spec":{"restartPolicy":"Always","containers":[{"name":"agent"}]}}}`, "deploy.pod_template.spec.restartPolicy: owned by warmpool"},
		{`{"image":"a:1","pod_template":{"spec":{"containers":[{"name":"agent","image":"b:2"}]}}}`, "deploy.image: given twice: here and in deploy.pod_template.spec.containers[0].image"},
		{`{"env":{"A":"1"},"pod_template":{"spec":{"containers":[{"name":"x"},{"name":"agent","env":[]}]}}}`, "deploy.env: given twice: here and in deploy.pod_template.spec.containers[1].env"},
		{`{"resources":{"cpu":"1"},"pod_template":{"spec":{"containers":[{"name":"agent","resources":{}}]}}}`, "deploy.resources: given twice"},
		{`{"command":["x"],"pod_template":{"spec":{"containers":[{"name":"agent","command":["y"]}]}}}`, "deploy.command: given twice"},
		{`{"pod_template":{"spec":{"containers":[{"name":"agent","env":{"A":"1"}}]}}}`, "deploy.pod_template: spec.containers[0].env: cannot unmarshal"},
	} {
		_, err := withTemplate(t, tc.deploy)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.deploy, err, tc.want)
		}
	}
	// The restart policy warmpool sets anyway is accepted.
	if _, err := withTemplate(t, `{"pod_template":{"spec":{"restartPolicy":"Never","containers":[{"name":"agent"}]}}}`); err != nil {
		t.Errorf("restartPolicy Never: %v", err)
	}
}

// A pod's requests, as a tenant's use counts them, are the agent container's: the
// shorthand's, or the pod template's when the container sets its resources there.
func TestPodRequests(t *testing.T) {
	d := DefaultScopeConfig().Deploy
	if cpu, mem := d.PodRequests(); cpu != 500 || mem != 512<<20 {
		t.Fatalf("the defaults request %d m, %d B; want 500m, 512Mi", cpu, mem)
	}
	d.Resources = Resources{}
	d.PodTemplate = []byte(`{"spec":{"containers":[{"name":"sidecar","resources":{"requests":{"cpu":"8"}}},` +
		`{"name":"agent","resources":{"requests":{"cpu":"2","memory":"1Gi"},"limits":{"cpu":"4"}}}]}}`)
	if cpu, mem := d.PodRequests(); cpu != 2000 || mem != 1<<30 {
		t.Fatalf("the template's agent requests %d m, %d B; want 2, 1Gi", cpu, mem)
	}
	d.PodTemplate = []byte(`{"spec":{"containers":[{"name":"agent","resources":{"limits":{"cpu":"1"}}}]}}`)
	if cpu, mem := d.PodRequests(); cpu != 0 || mem != 0 {
		t.Fatalf("an agent without requests requests %d m, %d B; want none", cpu, mem)
	}
}

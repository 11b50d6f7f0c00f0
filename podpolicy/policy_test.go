package podpolicy

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/warmpool/warmpool"
)

func specOf(tb testing.TB, deploy string) warmpool.DeploySpec {
	tb.Helper()
	cfg, err := warmpool.LoadScopeConfig([]byte(`{"deploy":` + deploy + `}`))
	if err != nil {
		tb.Fatalf("%s: %v", deploy, err)
	}
	return cfg.Deploy
}

func mustPolicy(tb testing.TB, cfg Config) *Policy {
	tb.Helper()
	p, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// The pod warmpool builds passes the restricted level as it is, and a template keeps
// its own fields while warmpool lays its own over them and fills the hardened defaults
// it leaves unset.
func TestPolicyRendersTemplate(t *testing.T) {
	ctx := context.Background()
	p := mustPolicy(t, Config{Namespace: "agents"})
	if err := p.Check(ctx, "s", warmpool.DefaultScopeConfig().Deploy); err != nil {
		t.Fatalf("the default pod: %v", err)
	}
	spec := specOf(t, `{"image":"reg/agent:1","pod_template":{"metadata":{"labels":{"team":"a","warmpool.io/scope":"forged"}},
		"spec":{"runtimeClassName":"gvisor","serviceAccountName":"agent","tolerations":[{"key":"pool","operator":"Equal","value":"agents","effect":"NoSchedule"}],
		"containers":[{"name":"agent","env":[{"name":"OPENAI_API_KEY","valueFrom":{"secretKeyRef":{"name":"keys","key":"openai"}}}],
		"resources":{"requests":{"cpu":"1","memory":"1Gi","nvidia.com/gpu":"1"},"limits":{"nvidia.com/gpu":"1"}}},
		{"name":"proxy","image":"reg/proxy:1","securityContext":{"runAsUser":1000}}]}}}`)
	if err := p.Check(ctx, "s", spec); err != nil {
		t.Fatalf("a restricted template: %v", err)
	}
	pod, err := p.Pod(ctx, "s", spec)
	if err != nil {
		t.Fatal(err)
	}
	agent, proxy := pod.Spec.Containers[0], pod.Spec.Containers[1]
	switch {
	case *pod.Spec.RuntimeClassName != "gvisor" || pod.Spec.ServiceAccountName != "agent" || len(pod.Spec.Tolerations) != 1:
		t.Errorf("the template's pod fields are lost: %+v", pod.Spec)
	case pod.Labels["team"] != "a" || pod.Labels[warmpool.LabelScope] != "s":
		t.Errorf("labels %v: want the template's and warmpool's own over them", pod.Labels)
	case agent.Image != "reg/agent:1" || agent.Env[0].ValueFrom == nil || agent.Resources.Requests.Cpu().String() != "1":
		t.Errorf("agent container %+v: want the shorthand's image and the template's env and resources", agent)
	case len(agent.Ports) != 1 || agent.Ports[0].Name != "http" || agent.ReadinessProbe == nil:
		t.Errorf("agent container: want warmpool's http port and readiness probe, got %+v %+v", agent.Ports, agent.ReadinessProbe)
	case pod.Spec.RestartPolicy != corev1.RestartPolicyNever || *pod.Spec.AutomountServiceAccountToken:
		t.Errorf("restart policy %q, automount %v: warmpool's", pod.Spec.RestartPolicy, *pod.Spec.AutomountServiceAccountToken)
	case proxy.SecurityContext.RunAsUser == nil || *proxy.SecurityContext.AllowPrivilegeEscalation || proxy.SecurityContext.Capabilities == nil:
		t.Errorf("the sidecar's securityContext %+v: want its own fields kept and the hardened ones filled", proxy.SecurityContext)
	}
}

// Each rule refuses with the field and the rule named; the privileged level lets the
// host through.
func TestPolicyRefuses(t *testing.T) {
	ctx := context.Background()
	tmpl := func(spec string) string {
		return `{"pod_template":{"spec":` + spec + `}}`
	}
	for _, tc := range []struct {
		name   string
		cfg    Config
		deploy string
		want   []string
	}{
		{"unknown field", Config{}, tmpl(`{"tolerations":[{"key":"a","efect":"NoSchedule"}],"containers":[{"name":"agent"}]}`),
			[]string{"deploy.pod_template.spec.tolerations[0].efect: unknown field"}},
		{"field in another case", Config{}, tmpl(`{"HostNetwork":true,"containers":[{"name":"agent"}]}`),
			[]string{"deploy.pod_template.spec.HostNetwork: unknown field"}},
		{"bad quantity", Config{}, tmpl(`{"containers":[{"name":"agent","resources":{"requests":{"cpu":"lots"}}}]}`),
			[]string{"deploy.pod_template: quantities must match"}},
		{"host network", Config{}, tmpl(`{"hostNetwork":true,"containers":[{"name":"agent"}]}`),
			[]string{`breaks Pod Security "restricted": host namespaces`}},
		{"privileged", Config{PodSecurity: "baseline"}, tmpl(`{"containers":[{"name":"agent","securityContext":{"privileged":true}}]}`),
			[]string{`breaks Pod Security "baseline": privileged`}},
		{"host path", Config{PodSecurity: "baseline"}, tmpl(`{"volumes":[{"name":"h","hostPath":{"path":"/"}}],"containers":[{"name":"agent"}]}`),
			[]string{"hostPath volumes"}},
		{"added capability", Config{}, tmpl(`{"containers":[{"name":"agent","securityContext":{"capabilities":{"add":["NET_ADMIN"]}}}]}`),
			[]string{"capabilities"}},
		{"namespace", Config{Namespace: "agents"}, `{"namespace":"kube-system"}`,
			[]string{`deploy.namespace: "kube-system" is not one of the namespaces scopes may use (agents; --namespaces)`}},
		{"image", Config{ImagePrefixes: []string{"reg.example/agents/"}}, `{"image":"evil/agent:1","pod_template":{"spec":{"initContainers":[{"name":"i","image":"reg.example/agents/init:1"}],"containers":[{"name":"agent"}]}}}`,
			[]string{`deploy.pod_template.spec.containers[0].image: "evil/agent:1" does not start with an allowed prefix`}},
		{"overflowing cpu", Config{}, `{"resources":{"cpu":"99999999999999999999999","memory":"1Gi"}}`,
			[]string{"deploy.resources.cpu:", "too large"}},
		{"zero memory", Config{}, `{"resources":{"cpu":"1","memory":"0"}}`,
			[]string{"deploy.resources.memory: must be more than zero"}},
		{"zero memory in the template", Config{}, tmpl(`{"containers":[{"name":"agent","resources":{"limits":{"memory":"0"}}}]}`),
			[]string{"deploy.pod_template.spec.containers[0].resources.limits.memory: must be more than zero"}},
		{"cpu cap", Config{MaxPodCPU: "2"}, tmpl(`{"containers":[{"name":"agent","resources":{"requests":{"cpu":"1500m"}}},{"name":"side","image":"x","resources":{"requests":{"cpu":"1"}}}]}`),
			[]string{"the pod requests 2500m cpu, over --max-pod-cpu 2"}},
		{"memory cap", Config{MaxPodMemory: "256Mi"}, `{}`,
			[]string{"the pod requests 512Mi memory, over --max-pod-memory 256Mi"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := mustPolicy(t, tc.cfg).Check(ctx, "s", specOf(t, tc.deploy))
			if warmpool.ErrorCode(err) != warmpool.CodeValidation {
				t.Fatalf("error %v, want VALIDATION", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	host := specOf(t, tmpl(`{"hostNetwork":true,"volumes":[{"name":"h","hostPath":{"path":"/"}}],"containers":[{"name":"agent","securityContext":{"privileged":true}}]}`))
	if err := mustPolicy(t, Config{PodSecurity: "privileged"}).Check(ctx, "s", host); err != nil {
		t.Errorf("privileged level: %v", err)
	}
	if _, err := New(Config{PodSecurity: "lax"}); err == nil || !strings.Contains(err.Error(), "--pod-security") {
		t.Errorf("--pod-security lax: %v, want it refused", err)
	}
	if _, err := New(Config{MaxPodMemory: "0"}); err == nil {
		t.Errorf("--max-pod-memory 0 accepted")
	}
}

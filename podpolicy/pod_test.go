package podpolicy

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/warmpool/warmpool"
)

// deployReq is a deploy request of scope's default spec with a command, args and env.
func deployReq(scope string, fence int64) warmpool.DeployRequest {
	spec := warmpool.DefaultScopeConfig().Deploy
	spec.Env = map[string]string{"ZED": "z", "ALPHA": "a"}
	spec.Command = []string{"/agent"}
	spec.Args = []string{"--listen", ":8080"}
	return warmpool.DeployRequest{ScopeID: scope, DeployVer: spec.DeployVer(), Fence: fence, Spec: spec}
}

// The pod of a spec without a template: warmpool's labels (label-safe) and annotations,
// the driver's extras (never over warmpool's own annotations), the hardened defaults,
// the sorted env, the shorthand's requests and memory limit, the port and probe.
func TestAgentPod(t *testing.T) {
	req := deployReq("team_a.agent-1", 7)
	req.Spec.Resources = warmpool.Resources{CPU: "250m", Memory: warmpool.DefaultMemory}
	name := warmpool.PodName(req.ScopeID, req.Fence)
	created := time.UnixMilli(1700000000123)
	p, err := AgentPod(req, name, "ns1", created, Extras{Grace: 5 * time.Second, NodeSelector: map[string]string{"pool": "agents"}, Annotations: map[string]string{"mesh/inject": "false", AnnotationFence: "666"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != name || p.Namespace != "ns1" {
		t.Fatalf("name %s/%s", p.Namespace, p.Name)
	}
	wantLabels := map[string]string{
		warmpool.LabelManagedBy: "warmpool",
		warmpool.LabelScope:     "team_a.agent-1", // '_' and '.' are fine in label values
		warmpool.LabelDeployVer: req.DeployVer,
		warmpool.LabelFence:     "7",
	}
	for k, v := range wantLabels {
		if p.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, p.Labels[k], v)
		}
		if errs := validation.IsValidLabelValue(p.Labels[k]); len(errs) > 0 {
			t.Errorf("label %s: %v", k, errs)
		}
	}
	wantAnn := map[string]string{
		AnnotationScopeID: "team_a.agent-1", AnnotationDeployVer: req.DeployVer, AnnotationFence: "7",
		AnnotationPort: "8080", AnnotationSSEPath: "/sse", AnnotationHealthPath: "/health",
		AnnotationCreatedAt: "1700000000123",
	}
	for k, v := range wantAnn {
		if p.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, p.Annotations[k], v)
		}
	}
	if p.Annotations["mesh/inject"] != "false" || p.Spec.NodeSelector["pool"] != "agents" {
		t.Errorf("extras: annotations %v node selector %v", p.Annotations, p.Spec.NodeSelector)
	}
	s := p.Spec
	if s.TerminationGracePeriodSeconds == nil || *s.TerminationGracePeriodSeconds != 5 {
		t.Errorf("termination grace %v", s.TerminationGracePeriodSeconds)
	}
	if s.RestartPolicy != corev1.RestartPolicyNever || s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
		t.Errorf("restart %s automount %v", s.RestartPolicy, s.AutomountServiceAccountToken)
	}
	if s.SecurityContext == nil || !*s.SecurityContext.RunAsNonRoot || s.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", s.SecurityContext)
	}
	if len(s.Containers) != 1 {
		t.Fatalf("containers %d", len(s.Containers))
	}
	c := s.Containers[0]
	if c.Name != "agent" || c.Image != warmpool.DefaultImage || strings.Join(c.Command, " ") != "/agent" || strings.Join(c.Args, " ") != "--listen :8080" {
		t.Errorf("container %s %s %v %v", c.Name, c.Image, c.Command, c.Args)
	}
	if len(c.Env) != 2 || c.Env[0].Name != "ALPHA" || c.Env[1].Name != "ZED" {
		t.Errorf("env not sorted: %+v", c.Env)
	}
	if q := c.Resources.Requests[corev1.ResourceMemory]; q.Cmp(resource.MustParse("512Mi")) != 0 {
		t.Errorf("memory request %s", q.String())
	}
	if q := c.Resources.Limits[corev1.ResourceMemory]; q.Cmp(resource.MustParse("512Mi")) != 0 {
		t.Errorf("memory limit %s", q.String())
	}
	if q := c.Resources.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse("250m")) != 0 {
		t.Errorf("cpu request %s", q.String())
	}
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Error("cpu limit set; only memory is limited")
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("ports %+v", c.Ports)
	}
	rp := c.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/health" || rp.HTTPGet.Port.IntValue() != 8080 {
		t.Errorf("readiness probe %+v", rp)
	}
	sc := c.SecurityContext
	if sc == nil || *sc.AllowPrivilegeEscalation || !*sc.RunAsNonRoot || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
		sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context %+v", sc)
	}

	if _, err := AgentPod(req, "Bad_Name", "ns1", created, Extras{Grace: time.Second}); warmpool.ErrorCode(err) != warmpool.CodeValidation {
		t.Errorf("bad name: %v", err)
	}
	bad := req
	bad.Spec.Resources.Memory = "lots"
	if _, err := AgentPod(bad, name, "ns1", created, Extras{Grace: time.Second}); warmpool.ErrorCode(err) != warmpool.CodeValidation {
		t.Errorf("bad memory: %v", err)
	}
}

// Every scope id has a valid label value: a valid one as it is, any other sanitised and
// made unique.
func TestScopeLabelValue(t *testing.T) {
	for _, id := range []string{"a", "team_a.agent-1", strings.Repeat("x", 63), "UPPER ok?", "-x-", strings.Repeat("é", 40), "___"} {
		v := ScopeLabelValue(id)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 || v == "" {
			t.Errorf("%q -> %q: %v", id, v, errs)
		}
		if warmpool.ValidScopeID(id) && v != id {
			t.Errorf("valid scope id %q changed to %q", id, v)
		}
	}
	if ScopeLabelValue("a b") == ScopeLabelValue("a/b") {
		t.Error("sanitised ids collide")
	}
}

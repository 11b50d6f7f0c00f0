package podpolicy

import (
	"testing"
	"time"

	"github.com/warmpool/warmpool"
)

// The agent container gets the pod's identity, report connection and report interval
// (SPEC §11.2, §12.4) over the scope's env, and nothing of it when reports are off.
func TestAgentPodGetsTheAgentEnv(t *testing.T) {
	req := deployReq("team-a", 3)
	req.Spec.Env = map[string]string{"K": "V", warmpool.EnvPodID: "the scope's, overridden"}
	name := warmpool.PodName(req.ScopeID, req.Fence)
	env := func(req warmpool.DeployRequest) map[string]string {
		t.Helper()
		p, err := AgentPod(req, name, "ns1", time.UnixMilli(1), Extras{Grace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, e := range p.Spec.Containers[0].Env {
			out[e.Name] = e.Value
		}
		return out
	}
	if got := env(req); len(got) != 2 || got["K"] != "V" {
		t.Fatalf("reports off: env %v, want the scope's alone", got)
	}
	req.Report = &warmpool.ReportTarget{URL: "http://warmpool", Token: func(scope, pod string) string { return "tok:" + scope + "/" + pod }}
	req.ReportIntervalS = 2
	got := env(req)
	want := map[string]string{"K": "V", warmpool.EnvPodID: name, warmpool.EnvScope: "team-a", warmpool.EnvDeployVer: req.DeployVer,
		warmpool.EnvReportURL: "http://warmpool", warmpool.EnvReportToken: "tok:team-a/" + name, warmpool.EnvReportInterval: "2"}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("env %s = %q, want %q (env %v)", k, got[k], v, got)
		}
	}
}

package e2b_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/warmpool/warmpool/server"
)

// A sandbox's envVars are its session's config (SPEC §12.2): the agent of its pod
// fetches them with the pod's token under the sandbox id; a bad name is 400 naming
// envVars.NAME.
func TestEnvVarsAreTheSandboxsSessionConfig(t *testing.T) {
	d := newDoor(t, func(c *server.Config) { c.ReportSecret = "report-secret" })
	sb := d.create(`{"templateID":"tpl","timeout":60,"envVars":{"GREETING":"hello"}}`)
	b, err := d.srv.SM.Get(context.Background(), "tpl", sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, d.api.URL+"/v1/agents/sessions/"+sb.SandboxID+"/config", nil)
	req.Header.Set("Authorization", "Bearer "+d.srv.ReportToken("tpl", b.PodID))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK || strings.TrimSpace(string(raw)) != `{"env":{"GREETING":"hello"}}` {
		t.Fatalf("config of the sandbox: %d %q %v", res.StatusCode, raw, err)
	}
	a := d.call(http.MethodPost, "/v2/sandboxes", `{"templateID":"tpl","envVars":{"1BAD":"x"}}`, gatewayKey)
	if a.status != http.StatusBadRequest || !strings.Contains(string(a.raw), `envVars.\"1BAD\"`) {
		t.Fatalf("bad envVars: %d %s, want 400 naming envVars.\"1BAD\"", a.status, a.raw)
	}
}

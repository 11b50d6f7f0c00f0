package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/server"
)

// imagePolicy refuses images outside reg/ and renders a pod as its image.
type imagePolicy struct{}

func (imagePolicy) Check(_ context.Context, _ string, spec warmpool.DeploySpec) error {
	if !strings.HasPrefix(spec.Image, "reg/") {
		return warmpool.Errorf(warmpool.CodeValidation, "deploy.image: %q is not under reg/", spec.Image)
	}
	return nil
}

func (imagePolicy) Render(_ context.Context, scope string, spec warmpool.DeploySpec) (any, error) {
	return map[string]string{"scope": scope, "image": spec.Image}, nil
}

// A PUT the deploy policy refuses stores nothing; a dry run answers the rendered pod
// and stores nothing either.
func TestDeployPolicyAtPut(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, func(c *server.Config) { c.DeployPolicy = imagePolicy{} })
	e.wantErr(e.do(http.MethodPut, "/v1/scopes/p/config", `{"deploy":{"image":"evil/agent:1"}}`), http.StatusBadRequest,
		warmpool.CodeValidation, `deploy.image: "evil/agent:1" is not under reg/`)
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/p/config", nil), http.StatusNotFound, warmpool.CodeScopeNotFound)

	got := e.ok(http.MethodPut, "/v1/scopes/p/config?dry_run=true", `{"deploy":{"image":"reg/agent:1"}}`)
	pod, _ := got["pod"].(map[string]any)
	if pod["image"] != "reg/agent:1" || pod["scope"] != "p" {
		t.Fatalf("dry run answered %v, want the rendered pod", got)
	}
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/p/config", nil), http.StatusNotFound, warmpool.CodeScopeNotFound)
	e.wantErr(e.do(http.MethodPut, "/v1/scopes/p/config?dry_run=true", `{"deploy":{"image":"evil/agent:1"}}`), http.StatusBadRequest,
		warmpool.CodeValidation, "not under reg/")
	e.wantErr(e.do(http.MethodPut, "/v1/scopes/p/config?dry_run=maybe", `{}`), http.StatusBadRequest, warmpool.CodeValidation, "dry_run: want one true or false")

	e.ok(http.MethodPut, "/v1/scopes/p/config", `{"deploy":{"image":"reg/agent:1"}}`)
	e.ok(http.MethodPut, "/v1/scopes/p/config?dry_run=false", `{"deploy":{"image":"reg/agent:2"}}`)
	if v := e.ok(http.MethodGet, "/v1/scopes/p/config", nil); num(t, v, "version") != 2 {
		t.Fatalf("dry_run=false stores: got %v", v)
	}
}

// Without a deploy policy (a replica built in process) a dry run says it renders
// nothing, and a config is held to Normalize's checks alone.
func TestDryRunWithoutPolicy(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.wantErr(e.do(http.MethodPut, "/v1/scopes/p/config?dry_run=true", `{}`), http.StatusBadRequest, warmpool.CodeValidation, "renders no pods")
	e.ok(http.MethodPut, "/v1/scopes/p/config", `{"deploy":{"pod_template":{"spec":{"containers":[{"name":"agent","image":"x:1"}]}}}}`)
}

// dryRunDriver is a driver whose dry run answers the pod as the driver deploys it.
type dryRunDriver struct{ warmpool.PodDriver }

func (dryRunDriver) DryRun(_ context.Context, scope string, spec warmpool.DeploySpec) (any, error) {
	return map[string]any{"scope": scope, "image": spec.Image, "terminationGracePeriodSeconds": 30}, nil
}

// With a driver that dry-runs, `?dry_run=true` answers the driver's pod, which carries
// the driver's own settings, not the policy's rendering of the spec alone (issue 22:
// the answer showed a termination grace of 0 where a deploy set 30 s).
func TestDryRunAnswersTheDriversPod(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, func(c *server.Config) { c.DeployPolicy = imagePolicy{}; c.Driver = dryRunDriver{c.Driver} })
	got := e.ok(http.MethodPut, "/v1/scopes/p/config?dry_run=true", `{"deploy":{"image":"reg/agent:1"}}`)
	pod, _ := got["pod"].(map[string]any)
	if pod["image"] != "reg/agent:1" || pod["terminationGracePeriodSeconds"] == nil {
		t.Fatalf("dry run answered %v, want the driver's pod", got)
	}
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/p/config", nil), http.StatusNotFound, warmpool.CodeScopeNotFound)
}

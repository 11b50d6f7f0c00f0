package e2e

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// The built binary holds every PUT to its deploy policy (SPEC §11.1), whatever the
// driver: the restricted level refuses a host network and names the rule, the allowed
// image prefixes and namespaces refuse the rest, nothing refused is stored, and a dry
// run answers the rendered pod.
func TestDeployPolicyOfTheBinary(t *testing.T) {
	_, base, bin := runServe(t, "--dev", "--store", filepath.Join(t.TempDir(), "w.db"),
		"--image-prefixes", "reg.example/agents/", "--namespaces", "agents", "--max-pod-memory", "4Gi")
	put := func(query, doc string) (int, map[string]any) {
		var out map[string]any
		return call(t, http.MethodPut, base+"/v1/scopes/pol/config"+query, doc, &out), out
	}
	for _, tc := range []struct{ doc, want string }{
		{`{"deploy":{"image":"reg.example/agents/a:1","pod_template":{"spec":{"hostNetwork":true,"containers":[{"name":"agent"}]}}}}`, "host namespaces"},
		{`{"deploy":{"image":"docker.io/evil:1"}}`, "does not start with an allowed prefix"},
		{`{"deploy":{"image":"reg.example/agents/a:1","namespace":"kube-system"}}`, `"kube-system" is not one of the namespaces`},
		{`{"deploy":{"image":"reg.example/agents/a:1","resources":{"cpu":"99999999999999999999999","memory":"1Gi"}}}`, "too large"},
		{`{"deploy":{"image":"reg.example/agents/a:1","resources":{"cpu":"1","memory":"8Gi"}}}`, "over --max-pod-memory 4Gi"},
		{`{"deploy":{"image":"reg.example/agents/a:1","pod_template":{"spec":{"tolerations":[{"efect":"NoSchedule"}],"containers":[{"name":"agent"}]}}}}`, "deploy.pod_template.spec.tolerations[0].efect: unknown field"},
	} {
		status, out := put("", tc.doc)
		if status != http.StatusBadRequest || !strings.Contains(errMessage(out), tc.want) {
			t.Errorf("PUT %s: %d %v, want 400 saying %q", tc.doc, status, out, tc.want)
		}
	}
	var got map[string]any
	if status := call(t, http.MethodGet, base+"/v1/scopes/pol/config", "", &got); status != http.StatusNotFound {
		t.Fatalf("GET of a scope every PUT of which was refused: %d, want 404", status)
	}
	status, out := put("?dry_run=true", `{"deploy":{"image":"reg.example/agents/a:1","namespace":"agents","pod_template":{"spec":{"runtimeClassName":"gvisor","containers":[{"name":"agent"}]}}}}`)
	pod, _ := out["pod"].(map[string]any)
	meta, _ := pod["metadata"].(map[string]any)
	spec, _ := pod["spec"].(map[string]any)
	if status != http.StatusOK || meta["namespace"] != "agents" || spec["runtimeClassName"] != "gvisor" {
		t.Fatalf("dry run: %d %v, want the rendered pod in agents with its runtime class", status, out)
	}
	// The CLI's dry run prints the pod as YAML, from a YAML config.
	file := filepath.Join(t.TempDir(), "pol.yaml")
	writeFile(t, file, "deploy:\n  image: reg.example/agents/a:1\n  pod_template:\n    spec:\n      runtimeClassName: gvisor\n      containers: [{name: agent}]\n")
	stdout, stderr, code := operator(t, bin, "scope", "put", "pol", "-f", file, "--dry-run", "--server", base)
	if code != 0 || !strings.Contains(stdout, "runtimeClassName: gvisor") || !strings.Contains(stdout, "containers:") {
		t.Fatalf("scope put --dry-run: exit %d, stdout %q, stderr %q: want the pod as YAML", code, stdout, stderr)
	}
	if status := call(t, http.MethodGet, base+"/v1/scopes/pol/config", "", &got); status != http.StatusNotFound {
		t.Fatalf("a dry run stored the scope: GET %d", status)
	}
}

// errMessage is the message of an error envelope.
func errMessage(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return msg
}

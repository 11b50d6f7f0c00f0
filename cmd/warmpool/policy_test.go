package main

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver"
	"github.com/warmpool/warmpool/server"
)

// The deploy policy takes the namespace of a scope's pod from the driver picked,
// through its Factory: the kubernetes driver's --namespace or WARMPOOL_NAMESPACE, a
// driver's own namespace flag whatever it is called, and none from a driver without
// namespaces, to which --namespace, a flag of another driver, gives nothing. The pod
// of a scope that names no namespace is rendered there, and that namespace is the one
// a scope may name.
func TestPolicyTakesTheDriversNamespace(t *testing.T) {
	ctx := context.Background()
	named := func(ns string) warmpool.DeploySpec {
		t.Helper()
		cfg, err := warmpool.LoadScopeConfig([]byte(`{"deploy":{"namespace":"` + ns + `"}}`))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Deploy
	}
	teamA := driver.Set{"team-a": {New: func(driver.Env) (warmpool.PodDriver, error) { return nil, nil }, Namespace: func() string { return "team-a" }}}
	for _, c := range []struct {
		name     string
		args     []string
		env      map[string]string
		drivers  driver.Set // nil: the registered ones
		rendered string     // the namespace of a scope that names none
		allowed  []string
		refused  []string
	}{
		{"kubernetes, --namespace", []string{"--driver", "kubernetes", "--namespace", "agents"}, nil, nil, "agents", []string{"agents"}, []string{"other"}},
		{"kubernetes, WARMPOOL_NAMESPACE", []string{"--driver", "kubernetes"}, map[string]string{"WARMPOOL_NAMESPACE": "agents"}, nil, "agents", []string{"agents"}, []string{"other"}},
		{"kubernetes, no namespace", []string{"--driver", "kubernetes"}, nil, nil, "default", nil, []string{"agents", "default"}},
		{"local, --namespace of another driver", []string{"--driver", "local", "--namespace", "agents"}, nil, nil, "default", nil, []string{"agents"}},
		{"a driver's own namespace", []string{"--driver", "team-a"}, nil, teamA, "team-a", []string{"team-a"}, []string{"agents"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cfg server.Config
			var o serveOptions
			getenv := func(k string) string { return c.env[k] }
			fs := serveFlags(&cfg, &o, getenv)
			if c.drivers != nil {
				o.drivers = c.drivers
			}
			if err := applyEnv(fs, getenv); err != nil {
				t.Fatal(err)
			}
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			if err := pickDriver(&cfg, &o); err != nil {
				t.Fatal(err)
			}
			pod, err := cfg.DeployPolicy.Render(ctx, "s", warmpool.DefaultScopeConfig().Deploy)
			if err != nil {
				t.Fatal(err)
			}
			if ns := pod.(*corev1.Pod).Namespace; ns != c.rendered {
				t.Errorf("a scope naming no namespace is rendered in %q, want %q", ns, c.rendered)
			}
			for _, ns := range c.allowed {
				if err := cfg.DeployPolicy.Check(ctx, "s", named(ns)); err != nil {
					t.Errorf("deploy.namespace %q: %v, want it allowed", ns, err)
				}
			}
			for _, ns := range c.refused {
				if err := cfg.DeployPolicy.Check(ctx, "s", named(ns)); warmpool.ErrorCode(err) != warmpool.CodeValidation || !strings.Contains(err.Error(), "deploy.namespace") {
					t.Errorf("deploy.namespace %q: %v, want it refused", ns, err)
				}
			}
		})
	}
}

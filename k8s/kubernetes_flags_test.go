package k8s

import (
	"flag"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver"
)

// The driver registers itself with its flags: --kubeconfig defaults to $KUBECONFIG,
// the driver built from them reads that kubeconfig (a missing one is an error naming
// it), and its Factory gives the deploy policy --namespace.
func TestRegisteredFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "kubeconfig")
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	set := driver.AddFlags(fs, func(k string) string { return map[string]string{"KUBECONFIG": missing}[k] })
	if err := fs.Parse([]string{"--namespace", "agents", "--kube-qps", "7"}); err != nil {
		t.Fatal(err)
	}
	if got := fs.Lookup("kubeconfig").Value.String(); got != missing {
		t.Errorf("--kubeconfig %q, want $KUBECONFIG %q", got, missing)
	}
	f, err := set.Pick(Name)
	if err != nil {
		t.Fatal(err)
	}
	if f.Namespace == nil || f.Namespace() != "agents" {
		t.Errorf("the Factory's namespace is not --namespace agents")
	}
	_, err = f.New(driver.Env{Logger: slog.New(slog.DiscardHandler), Clock: warmpool.SystemClock{}})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing kubeconfig: %v, want an error naming %s", err, missing)
	}
}

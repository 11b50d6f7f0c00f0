package fake_test

import (
	"bytes"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver"
	"github.com/warmpool/warmpool/driver/fake"
)

// build builds the fake driver through the registry from serve flags, as `warmpool
// serve --driver fake ARGS` does, and returns it with what it logged.
func build(t *testing.T, args ...string) (*fake.Driver, string, error) {
	t.Helper()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	set := driver.AddFlags(fs, func(string) string { return "" })
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	f, err := set.Pick(fake.Name)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	d, err := f.New(driver.Env{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Clock: warmpool.SystemClock{}})
	if err != nil {
		return nil, logs.String(), err
	}
	fd := d.(*fake.Driver)
	t.Cleanup(func() { _ = fd.Close() })
	return fd, logs.String(), nil
}

// --fake-state-dir gives drivers that share their pods, --fake-deploy-delay sets the
// deploy delay; without a state dir the driver warns that its pods are its own, and a
// negative delay is refused.
func TestFlags(t *testing.T) {
	dir := t.TempDir()
	a, logs, err := build(t, "--fake-state-dir", dir, "--fake-deploy-delay", "20ms")
	if err != nil || a.DeployDelay != 20*time.Millisecond || strings.Contains(logs, "--fake-state-dir") {
		t.Fatalf("shared: delay %v, logs %q, err %v; want 20ms and no warning", a.DeployDelay, logs, err)
	}
	b, _, err := build(t, "--fake-state-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	a.AddExternal(warmpool.Pod{ID: warmpool.PodName("flags", 1), ScopeID: "flags"})
	if pods := b.Pods(); len(pods) != 1 || pods[0].ScopeID != "flags" {
		t.Errorf("a driver on the same --fake-state-dir sees %+v, want the other's pod", pods)
	}
	if _, logs, err := build(t); err != nil || !strings.Contains(logs, "--fake-state-dir") {
		t.Errorf("in memory: logs %q, err %v; want a warning naming --fake-state-dir", logs, err)
	}
	if _, _, err := build(t, "--fake-deploy-delay", "-1s"); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("a negative delay: %v, want a refusal", err)
	}
}

// The driver of `serve --driver fake` keeps no deploy records (they would grow with
// every deploy for the life of the process) but still counts its deploys; one made
// with New keeps them for the tests that read them.
func TestServedDriverKeepsNoRecords(t *testing.T) {
	served, _, err := build(t)
	if err != nil {
		t.Fatal(err)
	}
	req := warmpool.DeployRequest{ScopeID: "rec", DeployVer: "v1", Fence: 1, Spec: warmpool.DeploySpec{ReadyTimeoutS: 5}}
	own := fake.New()
	for _, d := range []*fake.Driver{served, own} {
		if _, err := d.Deploy(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	if n, recs := served.DeployCount(), served.Deploys(); n != 1 || len(recs) != 0 {
		t.Errorf("served driver: %d deploys counted, %d records kept; want 1 and none", n, len(recs))
	}
	if recs := own.Deploys(); len(recs) != 1 || recs[0].Req.ScopeID != "rec" {
		t.Errorf("a New driver kept %+v, want the one deploy's record", recs)
	}
}

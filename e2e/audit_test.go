//go:build e2e_multi || faults

package e2e

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warmpool/warmpool/internal/testing/await"
)

// auditInterval is the full pass of the auditor replica: it runs at once and again.
const auditInterval = 500 * time.Millisecond

// auditClean checks that the full pass, now an audit, finds nothing to fix once a
// scenario's events were handled: it starts one more `warmpool serve` on args (the
// serve flags of the replicas under test, --listen and --instance-id aside) whose
// full pass runs every auditInterval, waits until that replica completed a pass
// (warmpool_sweeper_runs_total{sweep="reconcile",outcome="ok"}), and fails the test
// when its warmpool_sweeper_fixes_total{sweep="reconcile"} is not 0, naming the fixes
// and the pass's log line. The replica is stopped again.
func auditClean(t *testing.T, bin string, args ...string) {
	t.Helper()
	addr := freeAddr(t)
	args = append([]string{"serve", "--listen", addr, "--instance-id", "auditor"}, args...)
	args = append(args, "--reconcile-interval", auditInterval.String(), "--reconcile-duty", "1")
	p := startServe(t, bin, args...)
	base := "http://" + addr
	p.waitReady(t, base, 30*time.Second)
	var metrics map[string]map[string]float64
	await.True(t, 30*time.Second, "the auditor completed a full pass", func() bool {
		metrics = scrapeSweeper(t, base)
		return metrics["runs"]["ok"] >= 1
	})
	total := 0.0
	for _, n := range metrics["fixes"] {
		total += n
	}
	if total != 0 {
		var lines []string
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if strings.Contains(l, "full pass (audit) done") || strings.Contains(l, "pod buried") || strings.Contains(l, "orphan") || strings.Contains(l, "reindex") {
				lines = append(lines, l)
			}
		}
		t.Errorf("the audit pass had %v fixes to make after the events were handled, want 0: %v\n%s", total, metrics["fixes"], strings.Join(lines, "\n"))
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
}

// scrapeSweeper reads a replica's /metrics: the full pass's runs by outcome ("runs")
// and its fixes by fix ("fixes").
func scrapeSweeper(t *testing.T, base string) map[string]map[string]float64 {
	t.Helper()
	out := map[string]map[string]float64{"runs": {}, "fixes": {}}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(body), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || (name != "warmpool_sweeper_runs_total" && name != "warmpool_sweeper_fixes_total") {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, val, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(val, `"`)
		}
		if l["sweep"] != "reconcile" {
			continue
		}
		if name == "warmpool_sweeper_runs_total" {
			out["runs"][l["outcome"]] += v
		} else {
			out["fixes"][l["fix"]] += v
		}
	}
	return out
}

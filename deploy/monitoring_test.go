package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/metrics"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

const (
	rulesFile     = "monitoring/prometheusrule.yaml"
	dashboardFile = "monitoring/grafana-dashboard.json"
)

// ruleGroups reads the rule groups of the PrometheusRule: a plain Prometheus rule
// file's content.
func ruleGroups(t *testing.T) []any {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(raw, &pr); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("%s: want a monitoring.coreos.com/v1 PrometheusRule with rule groups, got %s %s", rulesFile, pr.APIVersion, pr.Kind)
	}
	return pr.Spec.Groups
}

// dashboardExprs returns every PromQL expression of the Grafana dashboard, with the
// dashboard's variables replaced by what Prometheus would get.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$scope", ".*")
	var exprs []string
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, vars.Replace(tg.Expr))
		}
	}
	if d.Title == "" || len(exprs) == 0 {
		t.Fatalf("%s: want a titled dashboard with queries", dashboardFile)
	}
	return exprs
}

// promtool finds promtool (Debian package prometheus). Where CI=true it must be
// there; elsewhere the test is skipped without it.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("promtool not found; CI installs it with the Debian package prometheus (.ci/run)")
	}
	t.Skip("promtool not found: install the Debian package prometheus to check the alert rules")
	return ""
}

// TestMonitoringRules checks the PrometheusRule's groups and every query of the
// dashboard with `promtool check rules`: the dashboard's queries go in as recording
// rules of a group of their own, so their PromQL is parsed too.
func TestMonitoringRules(t *testing.T) {
	tool := promtool(t)
	groups := ruleGroups(t)
	var records []map[string]string
	for i, expr := range dashboardExprs(t) {
		records = append(records, map[string]string{"record": fmt.Sprintf("dashboard:query_%d", i+1), "expr": expr})
	}
	groups = append(groups, map[string]any{"name": "dashboard-queries", "rules": records})
	out, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := exec.CommandContext(ctx, tool, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s\nrules:\n%s", err, res, out)
	}
}

// metricRef finds the metric names a query uses.
var metricRef = regexp.MustCompile(`\bwarmpool_[a-z0-9_]+`)

// TestMonitoringMetricsExist requires every warmpool metric that the dashboard and the
// alerts name to be one a replica exports (a histogram's _bucket, _count and _sum
// series included), so a renamed metric cannot leave a panel or an alert blind.
func TestMonitoringMetricsExist(t *testing.T) {
	exported := exportedSeries(t)
	raw, err := yaml.Marshal(ruleGroups(t))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw) + "\n" + strings.Join(dashboardExprs(t), "\n")
	used := map[string]bool{}
	for _, name := range metricRef.FindAllString(text, -1) {
		used[name] = true
	}
	if len(used) < 10 {
		t.Fatalf("only %d warmpool metrics named by the dashboard and alerts", len(used))
	}
	for name := range used {
		if exported[name] == nil {
			t.Errorf("%s is named by the dashboard or the alerts but no replica exports it", name)
		}
	}
}

// selector finds a metric's label matchers in a query: the name, and what is between
// the braces.
var (
	selector = regexp.MustCompile(`\b(warmpool_[a-z0-9_]+)\{([^}]*)\}`)
	matcher  = regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)`)
)

// TestMonitoringLabelsExist requires every label a query of the dashboard or the
// alerts matches on to be one of the metric's labels as a replica exports them
// (without --metrics-scope-detail), so that a panel does not filter the histograms by
// a scope they no longer carry (SPEC §11.4).
func TestMonitoringLabelsExist(t *testing.T) {
	exported := exportedSeries(t)
	var exprs []string
	for _, g := range ruleGroups(t) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			exprs = append(exprs, r.(map[string]any)["expr"].(string))
		}
	}
	exprs = append(exprs, dashboardExprs(t)...)
	n := 0
	for _, expr := range exprs {
		for _, sel := range selector.FindAllStringSubmatch(expr, -1) {
			labels := exported[sel[1]]
			for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
				n++
				if !labels[m[1]] {
					t.Errorf("%s matches %s on label %q, which it does not have (it has %v)", expr, sel[1], m[1], labels)
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d label matchers found in the dashboard and the alerts", n)
	}
}

// exportedSeries names every series name a replica exports once each of its metrics
// has a value, with its label names: the metrics fed one observation of each kind
// and a published scope for the pool gauges.
func exportedSeries(t *testing.T) map[string]map[string]bool {
	t.Helper()
	r := testredis.New(t)
	store := redisstore.NewStore(r.Client, r.Prefix)
	cfg := warmpool.DefaultScopeConfig()
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	if err := store.ScopePublish(context.Background(), redisstore.ScopeRecord{ScopeID: "s", Config: cfg, Version: 1, DeployVer: cfg.Deploy.DeployVer()}); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(store, metrics.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveRoute("s", warmpool.SourceWarm, "", time.Millisecond)
	m.ObserveRoute("s", "", warmpool.CodeQueueFull, time.Millisecond)
	m.ObserveDeploy("s", "fake", "ok", time.Second)
	m.ObservePhase("s", "fake", warmpool.PhaseReady, time.Second)
	m.ObserveScript("session_route", time.Millisecond)
	m.Observe("queue", "queued")
	m.ObserveJob("reclaim", "ok", time.Millisecond)
	m.ObserveFix("reclaim", "reclaimed")
	fams, err := m.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]map[string]bool{}
	for _, f := range fams {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		names[f.GetName()] = labels
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_count", "_sum"} {
				names[f.GetName()+s] = labels
			}
			bucket := map[string]bool{"le": true}
			for l := range labels {
				bucket[l] = true
			}
			names[f.GetName()+"_bucket"] = bucket
		}
	}
	var list []string
	for n := range names {
		list = append(list, n)
	}
	sort.Strings(list)
	t.Logf("exported: %s", strings.Join(list, " "))
	return names
}

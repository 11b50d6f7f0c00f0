package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/warmpool/warmpool/internal/metrics"
)

// defaultOutput is the output format when -o is not given: a table for a person at a
// terminal, JSON for a program reading a pipe or a file.
func defaultOutput(w io.Writer) string {
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return "table"
		}
	}
	return "json"
}

// printer prints an answer in one output format.
type printer struct {
	format string
	w      io.Writer
}

func newPrinter(format string, w io.Writer) (printer, error) {
	switch format {
	case "table", "json", "yaml":
		return printer{format: format, w: w}, nil
	}
	return printer{}, usageError(fmt.Sprintf("-o %q: want table, json or yaml", format))
}

// print prints v: indented JSON, YAML, or what table makes of it.
func (p printer) print(v map[string]any, table func(map[string]any) string) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	switch p.format {
	case "json":
		_, err = fmt.Fprintf(p.w, "%s\n", raw)
	case "yaml":
		var doc []byte
		if doc, err = yaml.JSONToYAML(raw); err == nil {
			_, err = p.w.Write(doc)
		}
	default:
		_, err = io.WriteString(p.w, table(v))
	}
	return err
}

// tabulate lays out a header and rows in aligned columns.
func tabulate(header []string, rows [][]string) string {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	_, _ = fmt.Fprintln(tw, strings.Join(header, "\t")) // into b: cannot fail
	for _, r := range rows {
		_, _ = fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
	return b.String()
}

// field reads a value at a path of keys in a decoded JSON object, as text ("" when
// missing).
func field(v any, path ...string) string {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[k]
	}
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// list reads the array at key of a decoded JSON object.
func list(v map[string]any, key string) []any {
	l, _ := v[key].([]any)
	return l
}

func scopesTable(v map[string]any) string {
	var rows [][]string
	for _, s := range list(v, "scopes") {
		rows = append(rows, []string{field(s, "scope_id"), field(s, "version"), field(s, "deploy_ver"), field(s, "pods"),
			field(s, "idle_pods"), field(s, "busy_pods"), field(s, "sessions"), field(s, "deploying"), field(s, "waiters")})
	}
	t := tabulate([]string{"SCOPE", "VERSION", "DEPLOY_VER", "PODS", "IDLE", "BUSY", "SESSIONS", "DEPLOYING", "WAITERS"}, rows)
	if next := field(v, "next"); next != "" {
		t += fmt.Sprintf("\nnext %s: more scopes follow (scope list --after %s, or without --limit for all)\n", next, next)
	}
	return t
}

// configRow is one stored config version as a table row.
func configRow(c any) []string {
	return []string{field(c, "version"), field(c, "config", "tenant"), field(c, "deploy_ver"), field(c, "config", "deploy", "image"),
		field(c, "config", "pool", "max_concurrency"), field(c, "config", "pool", "pod_concurrency"), age(field(c, "updated_at"))}
}

var configHeader = []string{"VERSION", "TENANT", "DEPLOY_VER", "IMAGE", "MAX_CONCURRENCY", "POD_CONCURRENCY", "UPDATED"}

func configTable(v map[string]any) string {
	return tabulate(append([]string{"SCOPE"}, configHeader...), [][]string{append([]string{field(v, "scope_id")}, configRow(v)...)})
}

// historyTable lists a page of versions, newest first, and says how to fetch the
// next page when older versions remain.
func historyTable(v map[string]any) string {
	var rows [][]string
	for _, c := range list(v, "versions") {
		rows = append(rows, configRow(c))
	}
	t := tabulate(configHeader, rows)
	if next := field(v, "next_before"); next != "" {
		t += fmt.Sprintf("\nnext_before %s: older versions remain (scope history %s --before %s, or --all)\n", next, field(v, "scope_id"), next)
	}
	return t
}

// poolTable lists the pods, each pod's deploy_ver marked current or old, then the
// scope's counts, its idle target (with the demand figures it came from) and its
// refill backoff, if any.
func poolTable(v map[string]any) string {
	current := field(v, "deploy_ver")
	var rows [][]string
	for _, p := range list(v, "pods") {
		ver := field(p, "deploy_ver")
		if ver == current {
			ver += " (current)"
		} else {
			ver += " (old)"
		}
		idle := "-"
		if since := field(p, "idle_since"); since != "" {
			idle = age(since)
		}
		rows = append(rows, []string{field(p, "pod_id"), field(p, "state"), field(p, "sessions"), field(p, "slots"), ver, idle})
	}
	return tabulate([]string{"POD", "STATE", "SESSIONS", "SLOTS", "DEPLOY_VER", "IDLE_FOR"}, rows) +
		fmt.Sprintf("\nscope %s: max_pods %s, deploys in flight %s, followers %s, waiters %s\n",
			field(v, "scope_id"), field(v, "max_pods"), field(v, "placeholders"), field(v, "followers"), field(v, "waiters")) +
		targetLine(v) + backoffLine(v)
}

// targetLine says how many idle pods the pool keeps, and under warm_policy demand what
// the estimate came from ("" from a server that does not say).
func targetLine(v map[string]any) string {
	target := field(v, "target_idle")
	if target == "" {
		return ""
	}
	line := fmt.Sprintf("target_idle %s (warm_policy %s)", target, field(v, "warm_policy"))
	if field(v, "demand", "lead_time_s") != "" {
		d := func(name string) string { return field(v, "demand", name) }
		line += fmt.Sprintf(": takes %s/s, frees %s/s, trend %s/s², deploy time %ss, lead time %ss, expected takes %s, within [%s, %s]",
			d("takes_per_s"), d("frees_per_s"), d("trend_per_s2"), d("deploy_time_s"), d("lead_time_s"), d("expected_takes"), d("min_idle_pods"), d("max_idle_pods"))
	}
	return line + "\n"
}

// backoffLine says the scope's refill backoff ("" without one).
func backoffLine(v map[string]any) string {
	if n := field(v, "backoff", "failures"); n != "" && n != "0" {
		return fmt.Sprintf("refill backoff: %s failed deploys in a row, none before %s; last: %s\n",
			n, field(v, "backoff", "until"), field(v, "backoff", "last_error"))
	}
	return ""
}

// age is how long ago an RFC 3339 time was, to the second ("" stays "").
func age(ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ts
	}
	return time.Since(t).Round(time.Second).String()
}

// versionInfo is this binary's version (as warmpool_build_info reports it) and the Go
// it was built with.
func versionInfo() map[string]any {
	return map[string]any{"version": metrics.Version(), "go_version": runtime.Version()}
}

func versionTable(v map[string]any) string {
	return fmt.Sprintf("warmpool %s (%s)\n", field(v, "version"), field(v, "go_version"))
}

package bench

import (
	"fmt"
	"io"
	"strings"
)

// Targets of issue 33, against the smallest size at the same pod_concurrency.
const (
	bigCommandsTarget = 1.2
	bigCPUTarget      = 1.5
	// An idle scope of 10,000 warm pods: Redis commands a second, and the share of a
	// core Redis and the replica take together.
	idleCommandsTarget = 50
	idleCoreTarget     = 0.02
)

// WriteText writes the rows, each operation's ratio to the smallest size of its
// pod_concurrency with the targets met or missed, and the bursts.
func (r *BigScopeResults) WriteText(out io.Writer) error {
	rows := [][]string{{"pods", "pod_concurrency", "operation", "ops", "commands/op", "Redis CPU us/op", "p50 ms", "p99 ms", "errors", "commands x", "CPU x"}}
	first := map[int]map[string]OpRow{}
	for _, row := range r.Rows {
		if first[row.PodConcurrency] == nil {
			first[row.PodConcurrency] = map[string]OpRow{}
			for _, o := range row.Ops {
				first[row.PodConcurrency][o.Name] = o
			}
		}
		for _, o := range row.Ops {
			base := first[row.PodConcurrency][o.Name]
			cx, ux := ratio(o.Commands, base.Commands), ratio(o.RedisUs, base.RedisUs)
			rows = append(rows, []string{fmt.Sprint(row.Pods), fmt.Sprint(row.PodConcurrency), o.Name, fmt.Sprint(o.Ops),
				fmt.Sprintf("%.1f", o.Commands), fmt.Sprintf("%.1f", o.RedisUs), fmt.Sprintf("%.2f", o.P50Ms), fmt.Sprintf("%.2f", o.P99Ms),
				fmt.Sprint(o.Errors), fmt.Sprintf("%.2f %s", cx, verdict(cx, bigCommandsTarget)), fmt.Sprintf("%.2f %s", ux, verdict(ux, bigCPUTarget))})
		}
	}
	text := table(rows)
	if len(r.Bursts) > 0 {
		rows = [][]string{{"routes/s", "pod_concurrency", "routes", "5xx", "other", "failed", "deploys", "want", "p50 ms", "p99 ms", "max ms", "commands/route", "Redis CPU s"}}
		for _, b := range r.Bursts {
			other := b.Routes - b.Failed - b.Server5xx() - b.Status[200]
			rows = append(rows, []string{fmt.Sprintf("%.0f", b.Rate), fmt.Sprint(b.PodConcurrency), fmt.Sprint(b.Routes), fmt.Sprint(b.Server5xx()),
				fmt.Sprint(other), fmt.Sprint(b.Failed), fmt.Sprint(b.Deploys), fmt.Sprint(b.WantDeploys), fmt.Sprintf("%.0f", b.P50Ms),
				fmt.Sprintf("%.0f", b.P99Ms), fmt.Sprintf("%.0f", b.MaxMs), fmt.Sprintf("%.1f", b.CommandsPerRt), fmt.Sprintf("%.2f", b.RedisCPUS)})
		}
		text += "\ncold bursts into one empty scope\n" + table(rows)
	}
	if i := r.Idle; i != nil {
		text += fmt.Sprintf("\nan idle scope of %d warm pods, sweeps on, over %.0fs: %.1f Redis commands/s (%s), Redis %.2f%% and the replica %.2f%% of a core (%s)\n",
			i.Pods, i.Seconds, i.CommandsPerS, verdict(i.CommandsPerS, idleCommandsTarget),
			100*i.RedisCore, 100*i.ReplicaCore, verdict(i.RedisCore+i.ReplicaCore, idleCoreTarget))
		text += fmt.Sprintf("its first full pass (hourly; a recount of every pod on the first and every tenth): %.0f Redis commands\n", i.PassCommands)
	}
	_, err := io.WriteString(out, text)
	return err
}

// table aligns rows of cells to the right, two spaces apart.
func table(rows [][]string) string {
	var width []int
	for _, row := range rows {
		for i, c := range row {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len(c))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		for i, c := range row {
			b.WriteString(strings.Repeat(" ", width[i]-len(c)+2) + c)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func ratio(v, base float64) float64 {
	if base == 0 {
		return 0
	}
	return v / base
}

func verdict(x, target float64) string {
	if x <= target {
		return "met"
	}
	return "missed"
}

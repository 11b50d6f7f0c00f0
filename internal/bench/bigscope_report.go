package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Targets of issue 33, against the smallest size at the same pod_concurrency.
const (
	bigCommandsTarget = 1.2
	bigCPUTarget      = 1.5
)

// WriteText writes the rows, each operation's ratio to the smallest size of its
// pod_concurrency with the targets met or missed, and the bursts.
func (r *BigScopeResults) WriteText(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "pods\tpod_concurrency\toperation\tops\tcommands/op\tRedis CPU us/op\tp50 ms\tp99 ms\terrors\tcommands x\tCPU x\t\n")
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
			fmt.Fprintf(w, "%d\t%d\t%s\t%d\t%.1f\t%.1f\t%.2f\t%.2f\t%d\t%.2f %s\t%.2f %s\t\n", row.Pods, row.PodConcurrency, o.Name, o.Ops,
				o.Commands, o.RedisUs, o.P50Ms, o.P99Ms, o.Errors, cx, verdict(cx, bigCommandsTarget), ux, verdict(ux, bigCPUTarget))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(r.Bursts) == 0 {
		return nil
	}
	fmt.Fprintf(out, "\ncold bursts into one empty scope\n")
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "routes/s\tpod_concurrency\troutes\t5xx\tother\tfailed\tdeploys\twant\tp50 ms\tp99 ms\tmax ms\tcommands/route\tRedis CPU s\t\n")
	for _, b := range r.Bursts {
		other := b.Routes - b.Failed - b.Server5xx() - b.Status[200]
		fmt.Fprintf(w, "%.0f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.1f\t%.2f\t\n", b.Rate, b.PodConcurrency, b.Routes, b.Server5xx(), other,
			b.Failed, b.Deploys, b.WantDeploys, b.P50Ms, b.P99Ms, b.MaxMs, b.CommandsPerRt, b.RedisCPUS)
	}
	return w.Flush()
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

package e2b

import (
	"context"
	"math"
	"strconv"
	"strings"

	"github.com/warmpool/warmpool"
)

// size is what a sandbox reports of its resources: its scope's deploy.resources
// requests, rounded up to whole cores and MiB (E2B's cpuCount, memoryMB).
type size struct {
	cpus, memoryMB int
}

// sizeOf is the size of a scope's sandboxes; the defaults when the scope's config
// cannot be read or its requests are in its pod template.
func (s *Server) sizeOf(ctx context.Context, scope string) size {
	cpu, mem := warmpool.DefaultCPU, warmpool.DefaultMemory
	if rec, err := s.cfg.Scopes.Scope(ctx, scope); err == nil {
		if res := rec.Config.Deploy.Resources; res.CPU != "" && res.Memory != "" {
			cpu, mem = res.CPU, res.Memory
		}
	}
	cores, _ := quantity(cpu)
	bytes, _ := quantity(mem)
	return size{cpus: max(1, int(math.Ceil(cores))), memoryMB: max(1, int(math.Ceil(bytes/(1<<20))))}
}

// suffixes are the multipliers of Kubernetes quantities' suffixes, longest first.
var suffixes = []struct {
	s string
	m float64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"Pi", 1 << 50}, {"Ei", 1 << 60},
	{"m", 1e-3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18},
}

// quantity is the value of a Kubernetes quantity as the config's validation admits
// them ("500m", "2", "512Mi", "1e9").
func quantity(q string) (float64, bool) {
	mult := 1.0
	for _, sf := range suffixes {
		if n, ok := strings.CutSuffix(q, sf.s); ok {
			q, mult = n, sf.m
			break
		}
	}
	v, err := strconv.ParseFloat(q, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v * mult, true
}

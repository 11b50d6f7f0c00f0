// Package cputime is the CPU time benchmarks report per operation (cpu-ns/op): the
// process's user and system time, the garbage collector's included. Where ns/op is
// mostly the wait for Redis, it is what an operation costs the process.
package cputime

import (
	"syscall"
	"testing"
	"time"
)

// Now is the CPU time (user and system) the process has used so far.
func Now(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Report reports as cpu-ns/op the CPU time the process has used since start (a Now
// before the loop), per operation of b.
func Report(b *testing.B, start time.Duration) {
	b.Helper()
	b.ReportMetric(float64((Now(b)-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

//go:build heapprofile

package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"
)

// A build with -tags heapprofile (never the released binary: runtime/pprof keeps the
// runtime's memory profiling on) writes, on each SIGUSR1, a heap profile and the
// runtime's memory figures into $WARMPOOL_HEAP_PROFILE: how the per-scope memory of
// docs/performance.md was found.
func init() {
	dir := os.Getenv("WARMPOOL_HEAP_PROFILE")
	if dir == "" {
		return
	}
	// One sample per 4 KiB allocated instead of per 512 KiB: the small per-scope
	// structs show up by their own names.
	runtime.MemProfileRate = 4096
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		for n := 1; ; n++ {
			<-sig
			if err := writeHeapProfile(dir, n); err != nil {
				fmt.Fprintln(os.Stderr, "heap profile:", err)
			}
		}
	}()
}

func writeHeapProfile(dir string, n int) error {
	runtime.GC()
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%d.pb.gz", n)))
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Close(); err != nil {
		return err
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s := fmt.Sprintf("%s heap_alloc %d heap_inuse %d heap_idle %d heap_released %d heap_sys %d stack_inuse %d sys %d objects %d goroutines %d next_gc %d\n",
		time.Now().UTC().Format(time.RFC3339), m.HeapAlloc, m.HeapInuse, m.HeapIdle, m.HeapReleased, m.HeapSys, m.StackInuse, m.Sys, m.HeapObjects, runtime.NumGoroutine(), m.NextGC)
	return os.WriteFile(filepath.Join(dir, fmt.Sprintf("heap-%d.txt", n)), []byte(s), 0o644)
}

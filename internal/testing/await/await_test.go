package await_test

import (
	"testing"
	"time"

	"github.com/warmpool/warmpool/internal/testing/await"
)

// fatalRecorder records a Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(string, ...any) { r.failed = true }

func TestTrue(t *testing.T) {
	n := 0
	await.True(t, time.Second, "the third ask", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond asked %d times, want 3", n)
	}

	r := &fatalRecorder{TB: t}
	await.True(r, 50*time.Millisecond, "never", func() bool { return r.failed })
	if !r.failed {
		t.Fatal("a condition that never held did not fail the test")
	}
}

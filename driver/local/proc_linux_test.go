package local

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool/internal/testing/await"
)

// An exited, unreaped child is "process exited"; a live process of another command
// is "something else", also while its command line reads empty (in the middle of an
// exec, or a kernel thread), which a zombie check tells apart.
func TestProcAliveExitedOrElse(t *testing.T) {
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Skipf("no sleep binary: %v", err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	if alive, why := procAlive(sleeper.Process.Pid, "pod"); alive || !strings.Contains(why, "something else") || zombie(sleeper.Process.Pid) {
		t.Errorf("sleep: alive %v (%s), want something else", alive, why)
	}

	done := exec.Command("true")
	if err := done.Start(); err != nil {
		t.Fatal(err)
	}
	pid := done.Process.Pid
	t.Cleanup(func() { _ = done.Wait() })
	// Not waited for: it stays a zombie once it exits.
	await.True(t, 10*time.Second, "the unreaped child to be a zombie", func() bool { return zombie(pid) })
	if alive, why := procAlive(pid, "pod"); alive || why != "process exited" {
		t.Errorf("zombie: alive %v (%s), want process exited", alive, why)
	}

	// PID 2 is kthreadd where this PID namespace is the host's: an empty command line,
	// and running.
	if b, err := os.ReadFile("/proc/2/cmdline"); err != nil || len(b) != 0 || zombie(2) {
		t.Skip("no kernel thread at PID 2 in this PID namespace")
	}
	if alive, why := procAlive(2, "pod"); alive || !strings.Contains(why, "something else") {
		t.Errorf("kernel thread: alive %v (%s), want something else", alive, why)
	}
}

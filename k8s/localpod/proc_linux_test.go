package localpod

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// An exited, unreaped child is "process exited"; a live process of another command
// is "something else", also while its command line reads empty in the middle of an
// exec, which a zombie check tells apart.
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
	deadline := time.Now().Add(10 * time.Second)
	for !zombie(pid) { // not waited for: it stays a zombie once it exits
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never became a zombie", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if alive, why := procAlive(pid, "pod"); alive || why != "process exited" {
		t.Errorf("zombie: alive %v (%s), want process exited", alive, why)
	}
}

package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
)

// sysProcAttr puts a pod in its own process group (so Delete can signal it whole) and
// makes the kernel kill it when the server dies, so no pod outlives its server. The
// death signal follows the OS thread that forked the child; the Go runtime does not end
// threads except those of goroutines that exit while locked to them, which we never do.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// procAlive reports whether pid still runs the demo agent of pod name. A recorded PID
// may have been reused by an unrelated process once the pod died, so the command line
// must still hold both the "demo-agent" word and the pod name. A zombie has an empty
// command line and counts as gone; so does a process in the middle of an exec (also an
// empty command line, for a moment) or a kernel thread, which run something else. When
// it is not alive, why says what was found.
func procAlive(pid int, name string) (alive bool, why string) {
	if pid <= 1 {
		return false, fmt.Sprintf("no process recorded (pid %d)", pid)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH):
		return false, "process gone"
	case err != nil:
		return false, "process unreadable: " + err.Error()
	case len(b) == 0 && zombie(pid):
		return false, "process exited"
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if !slices.Contains(args, agentWord) || !slices.Contains(args, name) {
		return false, fmt.Sprintf("process gone (pid %d now runs something else)", pid)
	}
	return true, ""
}

// zombie reports whether pid has exited and waits to be reaped: state Z (or X) in
// /proc/PID/stat, whose state follows the command name in parentheses.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // gone meanwhile
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}

//go:build unix && !linux

package local

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts a pod in its own process group so Delete can signal it whole.
// Only Linux has a parent-death signal: elsewhere pods of a server that crashed stay
// until List reports them and the sweeper deletes them, or an operator does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// procAlive reports whether pid still runs the demo agent of pod name; see the Linux
// version. Without /proc, ps shows the command line.
func procAlive(pid int, name string) (alive bool, why string) {
	if pid <= 1 {
		return false, fmt.Sprintf("no process recorded (pid %d)", pid)
	}
	if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
		return false, "process gone"
	}
	out, err := exec.Command("ps", "-o", "stat=,command=", "-p", strconv.Itoa(pid)).Output()
	if err != nil || len(strings.TrimSpace(string(out))) == 0 {
		return false, "process gone"
	}
	fields := strings.Fields(string(out))
	if strings.HasPrefix(fields[0], "Z") {
		return false, "process exited"
	}
	if !slices.Contains(fields[1:], agentWord) || !slices.Contains(fields[1:], name) {
		return false, fmt.Sprintf("process gone (pid %d now runs something else)", pid)
	}
	return true, ""
}

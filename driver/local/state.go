package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/warmpool/warmpool"
)

// record is the state file of one pod.
type record struct {
	Pod warmpool.Pod `json:"pod"`
	PID int          `json:"pid"`
	// OwnerPID is the server process that started the pod, for operators.
	OwnerPID int `json:"owner_pid"`
	// Ready is set once the pod's health endpoint answered 200.
	Ready   bool              `json:"ready"`
	Labels  map[string]string `json:"labels"`
	Created time.Time         `json:"created"`
	Args    []string          `json:"args"`
	// Stopped is set by Close once it stopped the pod (with its server): the pod is
	// dead whatever now runs under its PID.
	Stopped bool `json:"stopped,omitempty"`
}

// deadStopped is the Dead reason of a pod its server's Close stopped.
const deadStopped = "stopped with its server process"

func (l *Driver) statePath(name string) string {
	return filepath.Join(l.cfg.StateDir, name+stateExt)
}

// List reads every state file and reports each pod with Ready and Dead filled: a pod
// whose process is gone, or whose PID now runs something else, is Dead.
func (l *Driver) List(ctx context.Context) ([]warmpool.Pod, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(l.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("list local pods: %w", err)
	}
	l.mu.Lock()
	own := maps.Clone(l.procs)
	l.mu.Unlock()

	seen := map[string]bool{}
	var pods []warmpool.Pod
	for _, e := range entries {
		fname := e.Name()
		name, ok := strings.CutSuffix(fname, stateExt)
		if !ok || strings.HasPrefix(fname, ".") || e.IsDir() {
			continue // temporary files start with a dot
		}
		rec, err := l.readRecord(name)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) { // a file deleted meanwhile is just gone
				l.log.Warn("unreadable pod state file", "file", fname, "err", err)
			}
			continue
		}
		if rec.Labels[warmpool.LabelManagedBy] != warmpool.ManagedByValue {
			continue
		}
		seen[name] = true
		pod := rec.Pod
		if rec.Stopped {
			pod.Dead = deadStopped
		} else if p := own[name]; p != nil && p.pid == rec.PID {
			// Our own child: we know whether it has been reaped and how it ended.
			if p.hasExited() {
				pod.Dead = p.exitReason()
			}
		} else if alive, why := procAlive(rec.PID, name); !alive {
			pod.Dead = why
		}
		pod.Ready = rec.Ready && pod.Dead == ""
		pods = append(pods, pod)
	}
	// Our children that another server deleted leave no file behind: forget them.
	l.mu.Lock()
	for name, p := range own {
		if !seen[name] && p.hasExited() && l.procs[name] == p {
			delete(l.procs, name)
		}
	}
	l.mu.Unlock()
	warmpool.SortPods(pods)
	return pods, nil
}

// readRecord reads the state file of pod name.
func (l *Driver) readRecord(name string) (*record, error) {
	b, err := os.ReadFile(l.statePath(name))
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", l.statePath(name), err)
	}
	return &rec, nil
}

// writeRecord writes rec's state file whole, through a temporary file, so a reader
// never sees half a record. With exclusive set it fails with fs.ErrExist when the pod's
// file already exists: a hard link, unlike a rename, never replaces its target, which
// makes it the cross-process "create if absent" that the name check needs.
func (l *Driver) writeRecord(rec *record, exclusive bool) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(l.cfg.StateDir, "."+rec.Pod.ID+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }() // after a link or a rename this is a no-op or drops the spare name
	if _, err := f.Write(append(b, '\n')); err != nil {
		_ = f.Close() // the write's error is the one to return
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if exclusive {
		return os.Link(tmp, l.statePath(rec.Pod.ID))
	}
	return os.Rename(tmp, l.statePath(rec.Pod.ID))
}

// markStopped marks the state file of pod name stopped (Close) if it still describes
// pid.
func (l *Driver) markStopped(name string, pid int) {
	l.withRecord(name, pid, func(rec *record) {
		rec.Stopped = true
		if err := l.writeRecord(rec, false); err != nil {
			l.log.Warn("mark pod state file stopped", "pod", name, "err", err)
		}
	})
}

// removeRecord removes the state file of pod name if it still describes pid, so a
// late cleanup never removes a newer pod's file.
func (l *Driver) removeRecord(name string, pid int) {
	l.withRecord(name, pid, func(*record) {
		if err := os.Remove(l.statePath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			l.log.Warn("remove pod state file", "pod", name, "err", err)
		}
	})
}

// withRecord calls f with the state file of pod name, under l.mu, if the file still
// describes pid.
func (l *Driver) withRecord(name string, pid int, f func(*record)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rec, err := l.readRecord(name); err == nil && rec.PID == pid {
		f(rec)
	}
}

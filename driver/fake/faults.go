package fake

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Faults are driver failures injected into every process whose shared Driver
// (NewShared) keeps its pods in one directory, so that a test can make the deploys of
// running server processes fail and then mend them. Each Deploy reads them as it
// starts; the zero value injects nothing.
type Faults struct {
	// CreateError makes the create call fail at once with this message: no pod is made
	// and the deploy fails with DEPLOY_FAILED.
	CreateError string `json:"create_error,omitempty"`
	// CreateHang makes the create call hang, as a stalled API server does, until the
	// deploy's ready timeout or its context ends: no pod is made.
	CreateHang bool `json:"create_hang,omitempty"`
	// NeverReady makes created pods never become Ready: the deploy fails at its ready
	// timeout and removes its pod.
	NeverReady bool `json:"never_ready,omitempty"`
}

// faultsFile is where SetFaults writes; the leading dot keeps it out of the pod list.
const faultsFile = ".faults.json"

// SetFaults injects f into every shared Driver of dir from their next Deploy on; the
// zero Faults clears them. The file is replaced whole, so a Deploy never reads half of
// it.
func SetFaults(dir string, f Faults) error {
	path := filepath.Join(dir, faultsFile)
	if f == (Faults{}) {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, faultsFile+".tmp-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // after the rename there is nothing to remove
	if _, err := tmp.Write(b); err != nil {
		return errors.Join(err, tmp.Close())
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// faults reads the injected faults of a directory registry.
func (d dirRegistry) faults() (Faults, error) {
	var f Faults
	b, err := os.ReadFile(filepath.Join(string(d), faultsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, err
	}
	return f, json.Unmarshal(b, &f)
}

// faults: a Driver of its own takes its knobs instead.
func (memRegistry) faults() (Faults, error) { return Faults{}, nil }

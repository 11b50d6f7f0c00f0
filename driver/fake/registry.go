package fake

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/warmpool/warmpool"
)

// entry is one pod as a registry keeps it.
type entry struct {
	Pod   warmpool.Pod `json:"pod"`
	Ready bool         `json:"ready"`
	Dead  string       `json:"dead,omitempty"`
	// Token tells the deploy that created the entry from a later one of the same name.
	Token string `json:"token"`
}

// pod is the entry's pod with Ready and Dead filled.
func (e entry) pod() warmpool.Pod {
	p := e.Pod
	p.Ready, p.Dead = e.Ready, e.Dead
	return p
}

// errExists: create found a pod of that name.
var errExists = errors.New("pod already exists")

// registry is where a Driver keeps its pods: in its own memory (New), or in a directory
// that server processes on one machine share (NewShared). The Driver's mutex is held
// around every call.
type registry interface {
	// create adds e, or fails with errExists when a pod of its name is there.
	create(e entry) error
	// get returns the entry of pod id, and whether there is one.
	get(id string) (entry, bool, error)
	// put writes e, replacing the entry of its name.
	put(e entry) error
	// remove drops the entry of pod id; a missing one is not an error.
	remove(id string) error
	// all returns every entry.
	all() ([]entry, error)
	// faults returns the faults injected with SetFaults (none for a memory registry).
	faults() (Faults, error)
}

// memRegistry keeps the pods in a map: they exist only inside one Driver.
type memRegistry map[string]entry

func (m memRegistry) create(e entry) error {
	if _, ok := m[e.Pod.ID]; ok {
		return errExists
	}
	m[e.Pod.ID] = e
	return nil
}

func (m memRegistry) get(id string) (entry, bool, error) {
	e, ok := m[id]
	return e, ok, nil
}

func (m memRegistry) put(e entry) error {
	m[e.Pod.ID] = e
	return nil
}

func (m memRegistry) remove(id string) error {
	delete(m, id)
	return nil
}

func (m memRegistry) all() ([]entry, error) {
	out := make([]entry, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	return out, nil
}

// dirRegistry keeps one JSON file per pod in a directory, so that the Drivers of server
// processes sharing it see (and keep) one another's pods, as replicas sharing one
// cluster do. Files are written whole through a temporary file: a reader never sees
// half an entry.
type dirRegistry string

const entryExt = ".json"

func (d dirRegistry) path(id string) string { return filepath.Join(string(d), id+entryExt) }

// write puts e in a temporary file and hands its name to place, which links or renames
// it to the entry's path.
func (d dirRegistry) write(e entry, place func(tmp, path string) error) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(string(d), "."+e.Pod.ID+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }() // after a link, the spare name; after a rename, nothing
	if _, err := f.Write(b); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Close(); err != nil {
		return err
	}
	return place(tmp, d.path(e.Pod.ID))
}

// create links the new file into place: a hard link, unlike a rename, never replaces
// its target, so two processes creating one name cannot both succeed.
func (d dirRegistry) create(e entry) error {
	if !warmpool.ValidPodID(e.Pod.ID) {
		return fmt.Errorf("pod id %q: not a DNS-1123 name", e.Pod.ID)
	}
	err := d.write(e, os.Link)
	if errors.Is(err, fs.ErrExist) {
		return errExists
	}
	return err
}

func (d dirRegistry) get(id string) (entry, bool, error) {
	if !warmpool.ValidPodID(id) {
		return entry{}, false, nil // no file of ours can have such a name
	}
	b, err := os.ReadFile(d.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return entry{}, false, nil
	}
	if err != nil {
		return entry{}, false, err
	}
	var e entry
	if err := json.Unmarshal(b, &e); err != nil {
		return entry{}, false, fmt.Errorf("%s: %w", d.path(id), err)
	}
	return e, true, nil
}

func (d dirRegistry) put(e entry) error {
	if !warmpool.ValidPodID(e.Pod.ID) {
		return fmt.Errorf("pod id %q: not a DNS-1123 name", e.Pod.ID)
	}
	return d.write(e, os.Rename)
}

func (d dirRegistry) remove(id string) error {
	if !warmpool.ValidPodID(id) {
		return nil
	}
	if err := os.Remove(d.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (d dirRegistry) all() ([]entry, error) {
	files, err := os.ReadDir(string(d))
	if err != nil {
		return nil, err
	}
	var out []entry
	for _, f := range files {
		id, ok := strings.CutSuffix(f.Name(), entryExt)
		if !ok || f.IsDir() || strings.HasPrefix(f.Name(), ".") {
			continue // temporary files start with a dot
		}
		e, found, err := d.get(id)
		if err != nil {
			return nil, err
		}
		if found { // else deleted meanwhile by another process
			out = append(out, e)
		}
	}
	return out, nil
}

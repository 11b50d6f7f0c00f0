package redisstore

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/warmpool/warmpool/lua"
)

// Includes. Redis scripts cannot call one another, so the helpers scripts share are
// prepended to them as source: one file of lua/lib a topic (idem, due, demand,
// surplus, served, handoff, slots, deploy, config, claimpod, expire), each prepended
// only to the scripts that declare it in their header ("-- uses: slots handoff") and
// to the includes those declare in theirs, in one fixed order (includeOrder). Two
// files are not declared: lib/keys.lua (scope_keys) opens every script, and
// lib/guard.lua opens the body of a guarded one.
const (
	libDir = "lib/"
	// dueInclude is the include that notes due work (note_due): a script gets it
	// (directly or through the includes it uses) if and only if it is marked notes.
	dueInclude = "due"
	// usesLine opens the header line that declares the includes a file uses.
	usesLine = "-- uses:"
)

var (
	// keysLib is prepended to every script, after KEY_NAMES: scope_keys.
	keysLib = mustRead(libDir + "keys.lua")
	// guard opens the body of a guarded script: it refuses a call that Redis runs after
	// its caller's deadline, which Store.call appends to ARGV.
	guard = mustRead(libDir + "guard.lua")
)

// An include is one file of lua/lib but keys.lua and guard.lua.
type include struct {
	src string
	// uses are the includes its helpers call, as its header declares them.
	uses []string
}

// includes are the includes by name (the file's name in lib/ without .lua), and
// includeOrder the one order in which a script gets them: each after those it uses,
// ties by name.
var includes, includeOrder = readIncludes()

// readIncludes reads every include and orders them.
func readIncludes() (map[string]*include, []string) {
	names, err := fs.Glob(lua.Files, libDir+"*.lua")
	if err != nil {
		panic(err)
	}
	inc := map[string]*include{}
	for _, f := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(f, libDir), ".lua")
		if name == "keys" || name == "guard" {
			continue
		}
		src := mustRead(f)
		inc[name] = &include{src: src, uses: declaredUses(src)}
	}
	var order []string
	placed := map[string]bool{}
	for len(order) < len(inc) {
		var ready []string
		for name, in := range inc {
			if !placed[name] && !slices.ContainsFunc(in.uses, func(u string) bool { return !placed[u] }) {
				ready = append(ready, name)
			}
		}
		if len(ready) == 0 {
			panic(fmt.Sprintf("lua: the includes of lib/ use one another in a circle, or one uses an include that is not there: %v placed of %d", order, len(inc)))
		}
		first := slices.Min(ready)
		order = append(order, first)
		placed[first] = true
	}
	return inc, order
}

// declaredUses are the includes that the header of src (its opening comment lines)
// declares on its "-- uses:" line.
func declaredUses(src string) []string {
	var uses []string
	for line := range strings.Lines(src) {
		if !strings.HasPrefix(line, "--") {
			break
		}
		if rest, ok := strings.CutPrefix(line, usesLine); ok {
			uses = append(uses, strings.Fields(rest)...)
		}
	}
	return uses
}

// resolveUses are the includes a file that declares uses gets: those and the ones they
// use, in includeOrder. Errors: an include that is not in lib/.
func resolveUses(uses []string) ([]string, error) {
	need := map[string]bool{}
	var add func(name string) error
	add = func(name string) error {
		in, ok := includes[name]
		if !ok {
			return fmt.Errorf("uses %q, which is no include of lib/ (%v)", name, includeOrder)
		}
		if need[name] {
			return nil
		}
		need[name] = true
		for _, u := range in.uses {
			if err := add(u); err != nil {
				return fmt.Errorf("%s %w", name, err)
			}
		}
		return nil
	}
	for _, u := range uses {
		if err := add(u); err != nil {
			return nil, err
		}
	}
	var got []string
	for _, name := range includeOrder {
		if need[name] {
			got = append(got, name)
		}
	}
	return got, nil
}

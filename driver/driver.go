// Package driver is the registry of pod drivers. Each driver registers itself
// (Register, from its package's init) with its name, a function that declares its own
// `serve` flags and the constructor that reads them; cmd/warmpool imports every driver
// once, declares the flags of all of them (AddFlags) and builds the one `--driver`
// names (Set.Pick). Adding a driver so touches its own package and the one line of
// cmd/warmpool that imports it.
//
// The drivers that need no cluster live below: driver/local (local processes) and
// driver/fake (in memory, for tests); driver/drivertest is the contract suite every
// driver passes. The Kubernetes driver is k8s/, registered only where client-go may be
// linked. This package imports only the root package.
package driver

import (
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/warmpool/warmpool"
)

// Env is what a replica hands the driver it builds; both fields are always set.
type Env struct {
	// Logger receives the driver's logs; it carries the replica's instance and each
	// request's id.
	Logger *slog.Logger
	// Clock is the replica's clock.
	Clock warmpool.Clock
}

// Factory builds a driver from its flags once the flag set is parsed.
type Factory struct {
	// New builds the driver. A driver it returns that is an io.Closer is closed with
	// the replica.
	New func(Env) (warmpool.PodDriver, error)
	// Unchosen, when set, is called instead of New when another driver (chosen) is
	// picked: it refuses a flag of this driver that was given for nothing, where that
	// is surely a mistake (a fake deploy delay on a real driver).
	Unchosen func(chosen string) error
	// Namespace, when set, is the namespace the driver's flags give the pods of a
	// scope whose deploy.namespace is empty ("" when they give none): the deploy
	// policy renders those pods there and allows scopes to name it (cmd/warmpool). A
	// driver without namespaces leaves it nil.
	Namespace func() string
}

// Flags declares a driver's own flags on fs, each named after the driver
// (--fake-state-dir, --local-state-dir, --kube-qps), and returns its Factory, which
// reads them once fs is parsed. getenv is the command's environment, for a default
// taken from it (--kubeconfig: $KUBECONFIG).
type Flags func(fs *flag.FlagSet, getenv func(string) string) Factory

var (
	mu       sync.Mutex
	registry = map[string]Flags{}
)

// validName is what a driver may be called: the value of --driver and the driver
// label of the deploy metrics.
var validName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// Register adds the driver name, whose flags and constructor flags declares. It panics
// on an invalid name, a name registered twice or nil flags: a registration is part of
// the program, not of its input.
func Register(name string, flags Flags) {
	mu.Lock()
	defer mu.Unlock()
	switch {
	case !validName.MatchString(name):
		panic(fmt.Sprintf("driver.Register: name %q: want lower case letters, digits and '-'", name))
	case flags == nil:
		panic("driver.Register: " + name + ": nil flags")
	case registry[name] != nil:
		panic("driver.Register: " + name + " registered twice")
	}
	registry[name] = flags
}

// Names lists the registered drivers, sorted.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	return slices.Sorted(maps.Keys(registry))
}

// List is the registered drivers for a help line or a message: "fake, kubernetes or
// local" ("none" when there is none).
func List() string { return list(Names()) }

func list(names []string) string {
	switch len(names) {
	case 0:
		return "none"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Set is the Factory of every registered driver, their flags declared on one flag set.
type Set map[string]Factory

// AddFlags declares the flags of every registered driver on fs.
func AddFlags(fs *flag.FlagSet, getenv func(string) string) Set {
	mu.Lock()
	all := maps.Clone(registry)
	mu.Unlock()
	set := Set{}
	for _, name := range slices.Sorted(maps.Keys(all)) {
		set[name] = all[name](fs, getenv)
	}
	return set
}

// Pick returns the Factory of the driver called name, once the flag set is parsed,
// after every other driver has refused what of its flags was given for nothing
// (Factory.Unchosen). Errors: an unknown name, naming the registered ones; a refusal.
func (s Set) Pick(name string) (Factory, error) {
	f, ok := s[name]
	if !ok || f.New == nil {
		return Factory{}, fmt.Errorf("--driver %q: want %s", name, list(slices.Sorted(maps.Keys(s))))
	}
	for _, other := range slices.Sorted(maps.Keys(s)) {
		if u := s[other].Unchosen; other != name && u != nil {
			if err := u(name); err != nil {
				return Factory{}, err
			}
		}
	}
	return f, nil
}

package driver_test

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver"
)

// stub is a registered driver whose flag --<name>-knob is checked by Unchosen.
type stub struct {
	name string
	knob string
	pod  warmpool.PodDriver
}

func (s *stub) flags(fs *flag.FlagSet, getenv func(string) string) driver.Factory {
	fs.StringVar(&s.knob, s.name+"-knob", getenv("KNOB"), "a knob")
	return driver.Factory{
		New: func(driver.Env) (warmpool.PodDriver, error) { return s.pod, nil },
		Unchosen: func(chosen string) error {
			if s.knob != "" {
				return errors.New(s.name + " knob on " + chosen)
			}
			return nil
		},
	}
}

// The registry declares every driver's flags on one flag set, lists the drivers by
// name, picks the one asked for after the others refuse their flags given for
// nothing, and names the registered drivers when asked for another.
func TestRegistry(t *testing.T) {
	a, b := &stub{name: "test-a"}, &stub{name: "test-b"}
	driver.Register(a.name, a.flags)
	driver.Register(b.name, b.flags)
	if names := driver.Names(); !slices.Contains(names, "test-a") || !slices.Contains(names, "test-b") || !slices.IsSorted(names) {
		t.Fatalf("Names() = %q, want both stubs, sorted", names)
	}
	if l := driver.List(); !strings.HasSuffix(l, "test-a or test-b") {
		t.Errorf("List() = %q, want it to end with %q", l, "test-a or test-b")
	}

	parse := func(args ...string) driver.Set {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		set := driver.AddFlags(fs, func(k string) string { return map[string]string{"KNOB": ""}[k] })
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return set
	}
	f, err := parse().Pick("test-b")
	if err != nil || f.New == nil {
		t.Fatalf("Pick(test-b) = %+v, %v", f, err)
	}
	if _, err := parse("--test-a-knob", "x").Pick("test-b"); err == nil || err.Error() != "test-a knob on test-b" {
		t.Errorf("a flag of test-a with test-b picked: %v, want test-a's refusal", err)
	}
	if _, err := parse("--test-a-knob", "x").Pick("test-a"); err != nil {
		t.Errorf("test-a's own flag: %v", err)
	}
	_, err = parse().Pick("nope")
	if err == nil || !strings.HasPrefix(err.Error(), `--driver "nope": want `) || !strings.HasSuffix(err.Error(), "test-a or test-b") {
		t.Errorf("an unknown driver: %v, want one naming the registered drivers", err)
	}

	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	driver.AddFlags(fs, func(k string) string { return map[string]string{"KNOB": "from-env"}[k] })
	if got := fs.Lookup("test-a-knob").DefValue; got != "from-env" {
		t.Errorf("a default from getenv: %q, want from-env", got)
	}
}

// A registration is part of the program: a bad one panics at start.
func TestRegisterRefuses(t *testing.T) {
	ok := (&stub{name: "test-c"}).flags
	driver.Register("test-c", ok)
	for _, c := range []struct {
		name  string
		flags driver.Flags
		want  string
	}{
		{"test-c", ok, "twice"},
		{"", ok, "name"},
		{"Test_C", ok, "name"},
		{"test-d", nil, "nil flags"},
	} {
		func() {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, c.want) {
					t.Errorf("Register(%q): panic %q, want one saying %q", c.name, msg, c.want)
				}
			}()
			driver.Register(c.name, c.flags)
		}()
	}
}

package local_test

import (
	"flag"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver"
	"github.com/warmpool/warmpool/driver/local"
)

// Built through the registry, as `warmpool serve --driver local --local-state-dir DIR`
// does, the driver registers its pods in DIR.
func TestFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pods")
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	set := driver.AddFlags(fs, func(string) string { return "" })
	if err := fs.Parse([]string{"--local-state-dir", dir}); err != nil {
		t.Fatal(err)
	}
	f, err := set.Pick(local.Name)
	if err != nil {
		t.Fatal(err)
	}
	d, err := f.New(driver.Env{Logger: slog.New(slog.DiscardHandler), Clock: warmpool.SystemClock{}})
	if err != nil {
		t.Fatal(err)
	}
	l := d.(*local.Driver)
	t.Cleanup(func() { _ = l.Close() })
	if l.StateDir() != dir {
		t.Errorf("state dir %q, want %q", l.StateDir(), dir)
	}
}

package fake

import (
	"flag"
	"fmt"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver"
)

// Name is the driver's name: `serve --driver fake`.
const Name = "fake"

func init() { driver.Register(Name, flags) }

// options are the driver's serve flags.
type options struct {
	deployDelay time.Duration
	stateDir    string
	secretsFile string
}

func flags(fs *flag.FlagSet, _ func(string) string) driver.Factory {
	o := &options{}
	fs.DurationVar(&o.deployDelay, "fake-deploy-delay", 0, "testing: with --driver fake, how long each deploy takes (for load tests of cold bursts)")
	fs.StringVar(&o.stateDir, "fake-state-dir", "", "testing: with --driver fake, directory where pods are registered; replicas on one machine share it (empty: in memory, one replica only)")
	fs.StringVar(&o.secretsFile, "fake-secrets-file", "", `testing: with --driver fake, a JSON file {"<secret>": {"<key>": "<value>"}} that session configs' secret refs are read from`)
	return driver.Factory{New: o.new, Unchosen: o.unchosen}
}

// unchosen refuses the fake driver's knobs on another driver: a load test that
// believes its deploys take the delay would measure something else.
func (o *options) unchosen(chosen string) error {
	if o.deployDelay != 0 {
		return fmt.Errorf("a fake deploy delay needs the fake driver (--driver fake), not %q", chosen)
	}
	if o.stateDir != "" {
		return fmt.Errorf("a fake state dir needs the fake driver (--driver fake), not %q", chosen)
	}
	if o.secretsFile != "" {
		return fmt.Errorf("a fake secrets file needs the fake driver (--driver fake), not %q", chosen)
	}
	return nil
}

func (o *options) new(env driver.Env) (warmpool.PodDriver, error) {
	if o.deployDelay < 0 {
		return nil, fmt.Errorf("fake deploy delay %v: must not be negative", o.deployDelay)
	}
	f := New()
	if o.stateDir == "" {
		env.Logger.Warn("the fake driver keeps its pods in this process: replicas sharing a Redis need one --fake-state-dir, or each one's sweeper deletes the others' pods")
	} else {
		var err error
		if f, err = NewShared(o.stateDir); err != nil {
			return nil, err
		}
	}
	f.DeployDelay = o.deployDelay
	f.secrets.File = o.secretsFile
	// Nothing in a serving process reads the deploy records (they are the knobs of
	// tests that hold the Driver), and they would grow with every deploy.
	f.noRecords = true
	return f, nil
}

package local

import (
	"flag"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver"
)

// Name is the driver's name: `serve --driver local`, and what `serve --dev` runs.
const Name = "local"

func init() { driver.Register(Name, flags) }

func flags(fs *flag.FlagSet, _ func(string) string) driver.Factory {
	var stateDir string
	fs.StringVar(&stateDir, "local-state-dir", "", "local driver: directory where pods are registered; replicas on one machine share it")
	return driver.Factory{New: func(env driver.Env) (warmpool.PodDriver, error) {
		d, err := New(Config{StateDir: stateDir, Logger: env.Logger})
		if err != nil {
			return nil, err // not a nil *Driver in a non-nil interface
		}
		return d, nil
	}}
}

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
	var stateDir, secretsFile string
	fs.StringVar(&stateDir, "local-state-dir", "", "local driver: directory where pods are registered; replicas on one machine share it")
	fs.StringVar(&secretsFile, "local-secrets-file", "", `local driver: a JSON file {"<secret>": {"<key>": "<value>"}} that session configs' secret refs are read from`)
	return driver.Factory{New: func(env driver.Env) (warmpool.PodDriver, error) {
		d, err := New(Config{StateDir: stateDir, SecretsFile: secretsFile, Logger: env.Logger})
		if err != nil {
			return nil, err // not a nil *Driver in a non-nil interface
		}
		return d, nil
	}}
}

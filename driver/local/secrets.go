package local

import (
	"context"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver"
)

var _ warmpool.SecretReader = (*Driver)(nil)

// ReadSecret reads key of secret from Config.SecretsFile (driver.Secrets), which it
// reads again at every call. Errors: VALIDATION for a secret or key it does not hold,
// or with no file.
func (d *Driver) ReadSecret(ctx context.Context, pod warmpool.Pod, secret, key string) (string, error) {
	if d.cfg.SecretsFile == "" {
		return "", warmpool.Errorf(warmpool.CodeValidation, "secret %q: the local driver reads secrets only from --local-secrets-file, which is not set", secret)
	}
	s := driver.Secrets{File: d.cfg.SecretsFile}
	return s.ReadSecret(ctx, pod, secret, key)
}

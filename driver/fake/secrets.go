package fake

import (
	"context"

	"github.com/warmpool/warmpool"
)

var _ warmpool.SecretReader = (*Driver)(nil)

// SetSecret makes value the key of secret, which session configs' secret refs name.
func (f *Driver) SetSecret(secret, key, value string) { f.secrets.Set(secret, key, value) }

// ReadSecret reads key of secret: one SetSecret made, else one of the file of
// --fake-secrets-file (driver.Secrets). Errors: VALIDATION for one there is not.
func (f *Driver) ReadSecret(ctx context.Context, pod warmpool.Pod, secret, key string) (string, error) {
	return f.secrets.ReadSecret(ctx, pod, secret, key)
}

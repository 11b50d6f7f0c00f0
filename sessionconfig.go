package warmpool

import (
	"context"
	"encoding/json"
	"slices"
)

// SessionConfig is one session's own config (SPEC §12.2), given with its route or
// acquire and delivered to the pod's agent, never to the pod spec: its env, and the
// secret refs that warmpool resolves to values, in the scope's namespace, when the
// agent fetches them.
type SessionConfig struct {
	// Env maps names to values.
	Env map[string]string `json:"env,omitempty"`
	// SecretRefs maps names to a key of a secret of the scope's namespace.
	SecretRefs map[string]SecretRef `json:"secret_refs,omitempty"`
}

// SecretRef names one key of one secret.
type SecretRef struct {
	Secret string `json:"secret"`
	Key    string `json:"key"`
}

// Bounds of a SessionConfig (SPEC §12.2): its JSON, and its entries (env and secret
// refs together).
const (
	MaxSessionConfigBytes   = 64 << 10
	MaxSessionConfigEntries = 256
)

var (
	envNameFirst = byteSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
	envNameBytes = byteSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
	// a Kubernetes secret's data key: ^[-._a-zA-Z0-9]+$
	secretKeyBytes = byteSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._")
)

// ValidEnvName reports whether name is a C identifier (^[A-Za-z_][A-Za-z0-9_]*$), as
// environment variable names go, of at most 256 bytes.
func ValidEnvName(name string) bool {
	return name != "" && envNameFirst[name[0]] && validID(name, 256, envNameBytes, nil)
}

// Empty reports whether c holds nothing.
func (c *SessionConfig) Empty() bool {
	return c == nil || len(c.Env) == 0 && len(c.SecretRefs) == 0
}

// Check returns a VALIDATION error naming the first bad field of c: its size, its
// number of entries, a name that is no C identifier or that both env and secret_refs
// give, a secret ref without a secret name (a DNS-1123 subdomain) or key.
func (c *SessionConfig) Check() error {
	if c == nil {
		return nil
	}
	if n := len(c.Env) + len(c.SecretRefs); n > MaxSessionConfigEntries {
		return Errorf(CodeValidation, "session_config: %d entries in env and secret_refs, at most %d", n, MaxSessionConfigEntries)
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return Errorf(CodeValidation, "session_config: %v", err)
	}
	if len(raw) > MaxSessionConfigBytes {
		return Errorf(CodeValidation, "session_config: %d bytes as JSON, at most %d", len(raw), MaxSessionConfigBytes)
	}
	for _, name := range sortedKeys(c.Env) {
		if !ValidEnvName(name) {
			return Errorf(CodeValidation, "session_config.env.%s: the name must be a C identifier (^[A-Za-z_][A-Za-z0-9_]*$, at most 256 chars)", quoteName(name))
		}
	}
	for _, name := range sortedKeys(c.SecretRefs) {
		ref := c.SecretRefs[name]
		field := "session_config.secret_refs." + quoteName(name)
		switch {
		case !ValidEnvName(name):
			return Errorf(CodeValidation, "%s: the name must be a C identifier (^[A-Za-z_][A-Za-z0-9_]*$, at most 256 chars)", field)
		case hasKey(c.Env, name):
			return Errorf(CodeValidation, "%s: env names %s too; give a name once", field, name)
		case !ValidPodID(ref.Secret):
			return Errorf(CodeValidation, "%s.secret: want the name of a secret (a DNS-1123 subdomain), got %q", field, ref.Secret)
		case !validID(ref.Key, 253, secretKeyBytes, nil):
			return Errorf(CodeValidation, "%s.key: want a key of the secret (^[-._a-zA-Z0-9]{1,253}$), got %q", field, ref.Key)
		}
	}
	return nil
}

// quoteName is name as a field path shows it: quoted when it is no plain name.
func quoteName(name string) string {
	if ValidEnvName(name) {
		return name
	}
	b, _ := json.Marshal(name)
	return string(b)
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// sortedKeys are m's keys in order, so that the first bad field is always the same.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// SecretReader is a driver that can read its pods' secrets: a session_config's secret
// refs are resolved through it when the pod's agent fetches the config (SPEC §12.2).
// Without one, a route or acquire with secret refs is refused.
type SecretReader interface {
	// ReadSecret returns the value of key of the secret named secret, in the
	// namespace of pod (the scope's). Errors: VALIDATION when there is no such secret
	// or key, or the driver may not read it (the message names secret and key, never
	// a value); any other when the driver could not answer.
	ReadSecret(ctx context.Context, pod Pod, secret, key string) (string, error)
}

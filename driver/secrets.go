package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"

	"github.com/warmpool/warmpool"
)

// Secrets are the secrets of a driver that needs no cluster (warmpool.SecretReader):
// set in memory (Set, for tests), or read from a JSON file {"<secret>": {"<key>":
// "<value>"}} at every read, so that a test or an operator may change it while the
// replica runs. A secret in memory is found before the file's; namespaces are not
// told apart (these drivers have none). The zero value has none.
type Secrets struct {
	// File is the JSON file; "" for none.
	File string
	mu   sync.Mutex
	mem  map[string]map[string]string
}

// Set makes value the key of secret, in memory.
func (s *Secrets) Set(secret, key, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mem == nil {
		s.mem = map[string]map[string]string{}
	}
	if s.mem[secret] == nil {
		s.mem[secret] = map[string]string{}
	}
	s.mem[secret][key] = value
}

// ReadSecret returns key of secret. Errors: VALIDATION for a secret or key there is
// not; the file's error when it cannot be read or is no such JSON.
func (s *Secrets) ReadSecret(_ context.Context, _ warmpool.Pod, secret, key string) (string, error) {
	s.mu.Lock()
	data, ok := s.mem[secret]
	s.mu.Unlock()
	if !ok && s.File != "" {
		raw, err := os.ReadFile(s.File)
		if err != nil {
			return "", fmt.Errorf("secrets file: %w", err)
		}
		var all map[string]map[string]string
		if err := json.Unmarshal(raw, &all); err != nil {
			return "", fmt.Errorf("secrets file %s: want {\"<secret>\": {\"<key>\": \"<value>\"}}: %w", s.File, err)
		}
		data, ok = all[secret]
	}
	if !ok {
		return "", warmpool.Errorf(warmpool.CodeValidation, "secret %q: not found", secret)
	}
	v, ok := data[key]
	if !ok {
		return "", warmpool.Errorf(warmpool.CodeValidation, "secret %q has no key %q", secret, key)
	}
	return v, nil
}

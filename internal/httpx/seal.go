package httpx

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"

	"github.com/warmpool/warmpool"
)

// sealDomain begins the message whose HMAC under the report secret is the key that
// seals session configs: a domain of its own, so the key is neither a pod token's MAC
// nor a ticket.
const sealDomain = "warmpool session config key\x00"

// errSecretUnread: the report secret's file cannot be read now.
var errSecretUnread = warmpool.Errorf(warmpool.CodeStoreUnavailable, "the report secret cannot be read now").Retry(1)

// aead is the AES-256-GCM of the key derived from the current secret.
func (k *ReportKey) aead() (cipher.AEAD, error) {
	key := k.mac(sealDomain)
	if key == nil {
		return nil, errSecretUnread
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Seal encrypts a session config of scope for Redis (SPEC §12.2): AES-256-GCM under a
// key derived from the report secret, a random nonce first, the scope as additional
// data (a config sealed for one scope does not open in another).
func (k *ReportKey) Seal(scope string, plain []byte) ([]byte, error) {
	g, err := k.aead()
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, g.NonceSize(), g.NonceSize()+len(plain)+g.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return g.Seal(nonce, nonce, plain, []byte(scope)), nil
}

// Open decrypts what Seal sealed for scope. It fails for anything else: another
// scope's, altered, or sealed under another report secret.
func (k *ReportKey) Open(scope string, sealed []byte) ([]byte, error) {
	g, err := k.aead()
	if err != nil {
		return nil, err
	}
	if len(sealed) < g.NonceSize() {
		return nil, errors.New("session config: sealed value too short")
	}
	n := g.NonceSize()
	return g.Open(nil, sealed[:n], sealed[n:], []byte(scope))
}

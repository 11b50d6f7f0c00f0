package httpx

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"

	"github.com/warmpool/warmpool"
)

// ReportKey makes and checks the pod tokens of agent reports (SPEC §11.2): a pod's
// token is an HMAC-SHA256 of its scope and pod id under the report secret that every
// replica shares, so a leaked token speaks for one pod. The secret is a Token (fixed, or
// a file re-read when it changes); the HMAC is keyed by the secret's SHA-256, which is
// what a Token keeps. A nil *ReportKey is "reports are off".
type ReportKey struct {
	secret *Token
}

// NewReportKey returns the key of secret; nil (reports off) when secret is nil.
func NewReportKey(secret *Token) *ReportKey {
	if secret == nil {
		return nil
	}
	return &ReportKey{secret: secret}
}

// mac is the HMAC of scope and pod under the current secret; nil while the secret's
// file cannot be read.
func (k *ReportKey) mac(scope, pod string) []byte {
	st := k.secret.state()
	if st.digest == nil {
		return nil
	}
	h := hmac.New(sha256.New, st.digest[:])
	h.Write([]byte("warmpool report\x00" + scope + "\x00" + pod))
	return h.Sum(nil)
}

// Token is the report token of the pod pod of scope: what its WARMPOOL_REPORT_TOKEN
// holds. It is "" while the secret's file cannot be read.
func (k *ReportKey) Token(scope, pod string) string {
	m := k.mac(scope, pod)
	if m == nil {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(m)
}

// HasBearer reports whether r carries a bearer token at all.
func HasBearer(r *http.Request) bool { return bearer(r) != nil }

// Check is nil when r's bearer token is the report token of that pod, compared in
// constant time; otherwise an UNAUTHORIZED error (another pod's token, a gateway or
// admin token, none, or reports off).
func (k *ReportKey) Check(r *http.Request, scope, pod string) error {
	got := bearer(r)
	if k == nil {
		return warmpool.Errorf(warmpool.CodeUnauthorized, "agent reports are off: this replica has no --report-secret")
	}
	want := k.mac(scope, pod)
	if got == nil || want == nil {
		return warmpool.Errorf(warmpool.CodeUnauthorized, "missing or wrong report token")
	}
	dec, err := base64.RawURLEncoding.DecodeString(string(got))
	if err != nil || !hmac.Equal(dec, want) {
		return warmpool.Errorf(warmpool.CodeUnauthorized, "missing or wrong report token: a pod reports with its own WARMPOOL_REPORT_TOKEN")
	}
	return nil
}

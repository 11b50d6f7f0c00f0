package httpx

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/warmpool/warmpool"
)

// ReportKey makes and checks the pod tokens of agent reports (SPEC §11.2): a pod's
// token names its scope and pod id and carries an HMAC-SHA256 of both under the
// report secret that every replica shares, so a leaked token speaks for one pod, and a
// report is checked before its body is read. It also makes and checks the session
// tickets of SPEC §12.4: an HMAC of scope, session and pod under the same secret (in
// a domain of its own), handed out with a route's answer, which proves after a Redis
// data loss that the session was routed to that pod. The secret is a Token (fixed, or a file
// re-read when it changes); the HMAC is keyed by the secret's SHA-256, which is what a
// Token keeps. A nil *ReportKey is "reports are off".
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

// The domains that begin the messages of the key's HMACs: a pod token's MAC is never a
// session's ticket, nor the other way round.
const (
	tokenDomain  = "warmpool report\x00"
	ticketDomain = "warmpool session ticket\x00"
)

// tokenSep separates a pod token's scope, pod id and MAC: no scope or pod id holds it,
// nor base64url, and it is a character of a bearer token (RFC 6750's b64token).
const tokenSep = "~"

// mac is the HMAC of domain and the parts, each ended by a NUL, under the current
// secret; nil while the secret's file cannot be read.
func (k *ReportKey) mac(domain string, parts ...string) []byte {
	st := k.secret.state()
	if st.digest == nil {
		return nil
	}
	h := hmac.New(sha256.New, st.digest[:])
	h.Write([]byte(domain))
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte{0})
		}
		h.Write([]byte(p))
	}
	return h.Sum(nil)
}

// Token is the report token of the pod pod of scope: what its WARMPOOL_REPORT_TOKEN
// holds, "<scope>~<pod>~<MAC>" (the MAC in unpadded base64url). It is "" while the
// secret's file cannot be read.
func (k *ReportKey) Token(scope, pod string) string {
	m := k.mac(tokenDomain, scope, pod)
	if m == nil {
		return ""
	}
	return scope + tokenSep + pod + tokenSep + base64.RawURLEncoding.EncodeToString(m)
}

// Identify returns the scope and pod whose report token r carries as its bearer token,
// the MAC compared in constant time, without reading r's body. Errors: UNAUTHORIZED
// (reports off, no token, a token that names no pod, as those an older warmpool gave
// did, a wrong MAC: another pod's token, a gateway or admin token).
func (k *ReportKey) Identify(r *http.Request) (scope, pod string, err error) {
	got := bearer(r)
	if k == nil {
		return "", "", warmpool.Errorf(warmpool.CodeUnauthorized, "agent reports are off: this replica has no --report-secret")
	}
	scope, rest, ok := strings.Cut(string(got), tokenSep)
	pod, sum, named := strings.Cut(rest, tokenSep)
	if got == nil || !ok || !named || !warmpool.ValidScopeID(scope) || !warmpool.ValidPodID(pod) {
		return "", "", warmpool.Errorf(warmpool.CodeUnauthorized,
			"missing or wrong report token: a pod reports with its own WARMPOOL_REPORT_TOKEN, which names its scope and pod (a pod deployed by an older warmpool has one that does not: redeploy it)")
	}
	if !k.valid(sum, tokenDomain, scope, pod) {
		return "", "", warmpool.Errorf(warmpool.CodeUnauthorized, "missing or wrong report token: a pod reports with its own WARMPOOL_REPORT_TOKEN")
	}
	return scope, pod, nil
}

// Ticket is the session_ticket of session on pod of scope (SPEC §12.4); "" while the
// secret's file cannot be read.
func (k *ReportKey) Ticket(scope, session, pod string) string {
	m := k.mac(ticketDomain, scope, session, pod)
	if m == nil {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(m)
}

// ValidTicket reports whether ticket is the session_ticket of session on pod of scope,
// compared in constant time: a report's proof that the pod was given the session.
func (k *ReportKey) ValidTicket(scope, session, pod, ticket string) bool {
	return k.valid(ticket, ticketDomain, scope, session, pod)
}

// valid reports whether sum is the base64url MAC of domain and parts, compared in
// constant time; never while the secret's file cannot be read.
func (k *ReportKey) valid(sum, domain string, parts ...string) bool {
	want := k.mac(domain, parts...)
	if want == nil || base64.RawURLEncoding.EncodedLen(len(want)) != len(sum) {
		return false
	}
	dec, err := base64.RawURLEncoding.DecodeString(sum)
	return err == nil && hmac.Equal(dec, want)
}

package httpx

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
)

// A pod's report token names its scope and pod and carries their MAC, so a report is
// identified from its Authorization header alone (issue 31): Identify answers the pod
// of its own token, and refuses a token whose scope, pod or MAC was changed, the bare
// MAC of an older warmpool's tokens, ids that are none, another secret's token, and
// everything when reports are off.
func TestReportTokensNameTheirPod(t *testing.T) {
	k := NewReportKey(FixedToken("secret"))
	identify := func(k *ReportKey, tok string) (string, string, error) {
		r := httptest.NewRequest("POST", "/v1/agents/report", nil)
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		return k.Identify(r)
	}
	tok := k.Token("team-a.x", "team-a-x-1")
	if !strings.HasPrefix(tok, "team-a.x~team-a-x-1~") {
		t.Fatalf("token %q does not name its scope and pod", tok)
	}
	if scope, pod, err := identify(k, tok); err != nil || scope != "team-a.x" || pod != "team-a-x-1" {
		t.Fatalf("Identify(own token) = %q, %q, %v", scope, pod, err)
	}
	mac := tok[strings.LastIndex(tok, "~")+1:]
	for name, bad := range map[string]string{
		"another scope, same MAC": "team-b~team-a-x-1~" + mac,
		"another pod, same MAC":   "team-a.x~team-a-x-2~" + mac,
		"a changed MAC":           tok[:len(tok)-1] + "A",
		"a short MAC":             tok[:len(tok)-1],
		"the bare MAC":            mac,
		"no scope id":             "Team~team-a-x-1~" + mac,
		"no pod id":               "team-a.x~Pod_1~" + mac,
		"another secret's token":  NewReportKey(FixedToken("other")).Token("team-a.x", "team-a-x-1"),
		"none":                    "",
	} {
		if _, _, err := identify(k, bad); warmpool.ErrorCode(err) != warmpool.CodeUnauthorized {
			t.Errorf("%s (%q): %v, want UNAUTHORIZED", name, bad, err)
		}
	}
	if _, _, err := identify(k, mac); err == nil || !strings.Contains(err.Error(), "older warmpool") {
		t.Errorf("the bare MAC: %v, want a message that says an older warmpool made it", err)
	}
	if _, _, err := identify(nil, tok); warmpool.ErrorCode(err) != warmpool.CodeUnauthorized || !strings.Contains(err.Error(), "off") {
		t.Errorf("reports off: %v, want UNAUTHORIZED saying so", err)
	}
}

// A session ticket is valid for its scope, session and pod alone, under its secret:
// not for another pod (the proof a rebuild asks of a report), another session or
// scope, not as a changed or short string, and a pod token's MAC is no ticket (the
// domains differ, though the messages would otherwise share their parts).
func TestSessionTicketsProveOneBinding(t *testing.T) {
	k := NewReportKey(FixedToken("secret"))
	tk := k.Ticket("a", "s1", "p1")
	if len(tk) != warmpool.SessionTicketLen || !k.ValidTicket("a", "s1", "p1", tk) {
		t.Fatalf("ticket %q (%d chars) not valid for its own binding", tk, len(tk))
	}
	if k.Ticket("a", "s1", "p1") != tk {
		t.Fatal("two tickets of one binding differ")
	}
	tok := k.Token("a", "s1")
	for name, c := range map[string][4]string{
		"another pod":             {"a", "s1", "p2", tk},
		"another session":         {"a", "s2", "p1", tk},
		"another scope":           {"b", "s1", "p1", tk},
		"a changed ticket":        {"a", "s1", "p1", tk[:warmpool.SessionTicketLen-1] + "A"},
		"a short ticket":          {"a", "s1", "p1", tk[:warmpool.SessionTicketLen-1]},
		"a pod token's MAC":       {"a", "s1", "", tok[strings.LastIndex(tok, "~")+1:]},
		"another secret's ticket": {"a", "s1", "p1", NewReportKey(FixedToken("other")).Ticket("a", "s1", "p1")},
	} {
		if k.ValidTicket(c[0], c[1], c[2], c[3]) {
			t.Errorf("%s: valid", name)
		}
	}
}

// A sealed session config opens for its scope under the same secret, and for nothing
// else: another scope, another secret, a flipped byte. Two seals of one config differ
// (a fresh nonce each), and neither holds the plain text.
func TestSealedConfigOpensOnlyForItsScope(t *testing.T) {
	k := NewReportKey(FixedToken("secret"))
	plain := []byte(`{"env":{"API_KEY":"s3cr3t-value"}}`)
	a, err := k.Seal("s1", plain)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := k.Seal("s1", plain)
	if bytes.Equal(a, b) || bytes.Contains(a, []byte("s3cr3t-value")) {
		t.Fatalf("seals %x and %x: want two different ciphertexts without the value", a, b)
	}
	if got, err := k.Open("s1", a); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open: %q %v", got, err)
	}
	flipped := bytes.Clone(a)
	flipped[len(flipped)-1] ^= 1
	other := NewReportKey(FixedToken("other secret"))
	for name, open := range map[string]func() ([]byte, error){
		"another scope":  func() ([]byte, error) { return k.Open("s2", a) },
		"another secret": func() ([]byte, error) { return other.Open("s1", a) },
		"a flipped byte": func() ([]byte, error) { return k.Open("s1", flipped) },
		"too short":      func() ([]byte, error) { return k.Open("s1", a[:5]) },
	} {
		if got, err := open(); err == nil {
			t.Errorf("%s: opened as %q, want an error", name, got)
		}
	}
}

package httpx

import (
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

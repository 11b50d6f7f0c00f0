package warmpool

import (
	"regexp"
	"strings"
	"testing"
)

// FuzzIDs checks the id checks against the patterns of SPEC §1 (scope, session) and
// of the pod and request ids, as regexps.
func FuzzIDs(f *testing.F) {
	for _, seed := range []string{
		"", "a", "demo", "a-", "-a", "a..b", "A", "s:1", "a\n", "é", "\xff", "a/b+c=", "p.1-x", "a_b",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 128), strings.Repeat("a", 129),
		strings.Repeat("a", 253), strings.Repeat("a", 254),
	} {
		f.Add(seed)
	}
	patterns := []struct {
		name  string
		valid func(string) bool
		re    *regexp.Regexp
	}{
		{"ValidScopeID", ValidScopeID, regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)},
		{"ValidSessionID", ValidSessionID, regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)},
		{"ValidPodID", ValidPodID, regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)},
		{"ValidRequestID", ValidRequestID, regexp.MustCompile(`^[A-Za-z0-9._:/+=-]{1,128}$`)},
	}
	f.Fuzz(func(t *testing.T, id string) {
		for _, p := range patterns {
			if got, want := p.valid(id), p.re.MatchString(id); got != want {
				t.Errorf("%s(%q) = %v, want %v", p.name, id, got, want)
			}
		}
		if (CheckScopeID(id) == nil) != ValidScopeID(id) || (CheckSessionID(id) == nil) != ValidSessionID(id) {
			t.Errorf("Check and Valid disagree on %q", id)
		}
	})
}

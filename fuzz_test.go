package warmpool

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// FuzzDecodeScopeConfig: any body either fails with a VALIDATION *Error that names a
// field, or yields a config that is valid, already normalised, and survives a JSON
// round trip (what the store does) with the same config and deploy_ver.
func FuzzDecodeScopeConfig(f *testing.F) {
	for _, seed := range []string{
		``,
		`{}`,
		`null`,
		`{}]`,
		`{"deploy":{"image":"agent:1","env":{"B":"2","A":"1"},"command":["run"],"args":[]}}`,
		`{"deploy":{"resources":{"cpu":"0.5","memory":""}},"pool":{"queue_size":0}}`,
		`{"deploy":{"namespace":"agents","port":65535,"sse_path":"/v1/sse;x","ready_timeout_s":3600}}`,
		`{"pool":{"max_concurrency":8,"pod_concurrency":2,"min_idle_pods":4,"max_parallel_deploys":4}}`,
		`{"deploy":{"image":"\u00a0","container_name":" ","env":null},"pool":null}`,
		`{"deploy":{"image":"a\u000bb","env":{"K":"\xff"}}}`,
		`{"Deploy":{"IMAGE":"x"}}`,
		`{"deploy":{"port":"8080"}}`,
		`{"deploy":{"bogus":1}}`,
		`{"":"0"}`,
		`{"deploy":{"a \"b\"\n":1}}`,
		`{"pool":{"queue_size":-1}}`,
		`{"deploy":{`,
		`[1,2]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		cfg, err := DecodeScopeConfig(bytes.NewReader(body))
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeValidation {
				t.Fatalf("error %v (%T) is not a VALIDATION *Error", err, err)
			}
			field, _, ok := strings.Cut(e.Message, ": ")
			if !ok || field == "" {
				t.Fatalf("error %q does not start with a field name", e.Message)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("decoded config does not validate: %v", err)
		}
		again := cfg
		if err := again.Normalize(); err != nil || !reflect.DeepEqual(again, cfg) {
			t.Fatalf("decoded config is not normalised: %+v -> %+v, %v", cfg, again, err)
		}

		doc, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeScopeConfig(bytes.NewReader(doc))
		if err != nil {
			t.Fatalf("re-encoded config %s is rejected: %v", doc, err)
		}
		if got, want := back.Deploy.DeployVer(), cfg.Deploy.DeployVer(); got != want {
			t.Fatalf("deploy_ver %s after a round trip, was %s (%s)", got, want, doc)
		}
		if !reflect.DeepEqual(back, cfg) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", cfg, back)
		}
	})
}

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

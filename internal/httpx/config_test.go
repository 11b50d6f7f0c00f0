package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
)

func mustDecode(tb testing.TB, doc string) warmpool.ScopeConfig {
	tb.Helper()
	cfg, err := DecodeScopeConfig(strings.NewReader(doc))
	if err != nil {
		tb.Fatalf("DecodeScopeConfig(%s): %v", doc, err)
	}
	return cfg
}

// wantValidation checks that err is a VALIDATION *warmpool.Error whose message starts with the
// field it blames.
func wantValidation(tb testing.TB, err error, field string) {
	tb.Helper()
	var e *warmpool.Error
	if !errors.As(err, &e) {
		tb.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	if e.Code != warmpool.CodeValidation {
		tb.Fatalf("error %v: code %s, want VALIDATION", err, e.Code)
	}
	if !strings.HasPrefix(e.Message, field+": ") {
		tb.Fatalf("error %q does not name the field %s", e.Message, field)
	}
}

func configsEqual(a, b warmpool.ScopeConfig) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

func TestDecodeRejectsBadJSON(t *testing.T) {
	for _, tc := range []struct{ name, doc, field string }{
		{"empty body", ``, "body"},
		{"blank body", " \n\t", "body"},
		{"truncated", `{"deploy":{`, "body"},
		{"syntax", `{"deploy" 1}`, "body"},
		{"missing value", `{"deploy":}`, "body"},
		{"trailing comma", `{"deploy":{},}`, "body"},
		{"second document", `{} {}`, "body"},
		{"trailing word", `{} x`, "body"},
		{"array", `[]`, "body"},
		{"string", `"config"`, "body"},
		{"number", `42`, "body"},
		{"deploy not an object", `{"deploy":1}`, "deploy"},
		{"port as string", `{"deploy":{"port":"8080"}}`, "deploy.port"},
		{"port overflow", `{"deploy":{"port":1e10}}`, "deploy.port"},
		{"queue size fraction", `{"pool":{"queue_size":1.5}}`, "pool.queue_size"},
		{"memory as number", `{"deploy":{"resources":{"memory":512}}}`, "deploy.resources.memory"},
		{"command as string", `{"deploy":{"command":"run"}}`, "deploy.command"},
		{"env value as number", `{"deploy":{"env":{"A":1}}}`, "deploy.env"},
		{"unknown top-level field", `{"deploy":{},"extra":true}`, "extra"},
		{"unknown deploy field", `{"deploy":{"replicas":3}}`, "deploy.replicas"},
		{"unknown resources field", `{"deploy":{"resources":{"gpu":"1"}}}`, "deploy.resources.gpu"},
		{"unknown pool field", `{"pool":{"max_pods":3}}`, "pool.max_pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeScopeConfig(strings.NewReader(tc.doc))
			wantValidation(t, err, tc.field)
		})
	}
}

// Every fault of a document is reported at once, each with its full path, in the
// order of the fields: unknown fields, values of the wrong type and bad values alike.
func TestDecodeReportsEveryFault(t *testing.T) {
	doc := `{"deploy":{"imagee":"x","port":"80","resources":{"gpu":"1","memory":"lots"}},` +
		`"pool":{"pod_concurrency":0,"queue_size":-1,"max_pods":3},"extra":1}`
	_, err := DecodeScopeConfig(strings.NewReader(doc))
	wantValidation(t, err, "deploy.imagee")
	want := []string{
		"deploy.imagee: unknown field",
		"deploy.port: expected int, got JSON string",
		"deploy.resources.gpu: unknown field",
		"extra: unknown field",
		"pool.max_pods: unknown field",
		`deploy.resources.memory: must be a quantity such as 512Mi, got "lots"`,
		"pool.pod_concurrency: must be between 1 and 10000, got 0",
		"pool.queue_size: must be between 0 and 100000, got -1",
	}
	if got := strings.Split(err.(*warmpool.Error).Message, "; "); !slices.Equal(got, want) {
		t.Fatalf("faults:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A key given twice in one object is refused, naming the key by its path: encoding/json
// would silently keep the last value, so the sender's intent is unknown.
func TestDecodeRejectsDuplicateKeys(t *testing.T) {
	for _, tc := range []struct{ name, doc, field string }{
		{"top level", `{"pool":{},"pool":{"queue_size":0}}`, "pool"},
		{"pool field", `{"pool":{"queue_size":1,"queue_size":2}}`, "pool.queue_size"},
		{"nested deeper", `{"deploy":{"resources":{"cpu":"1","memory":"1Gi","cpu":"2"}}}`, "deploy.resources.cpu"},
		{"map key", `{"deploy":{"env":{"A":"1","B":"2","A":"3"}}}`, "deploy.env.A"},
		{"empty key", `{"deploy":{"env":{"":"1","":"2"}}}`, `deploy.env.""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeScopeConfig(strings.NewReader(tc.doc))
			wantValidation(t, err, tc.field)
			if want := tc.field + ": duplicate key"; err.(*warmpool.Error).Message != want {
				t.Fatalf("error %q, want the message %q", err, want)
			}
		})
	}
	// The same key in different objects, or in objects of a list, is no duplicate.
	var v struct {
		A struct{ K int }   `json:"a"`
		B struct{ K int }   `json:"b"`
		L []struct{ K int } `json:"l"`
	}
	if err := DecodeStrict([]byte(`{"a":{"K":1},"b":{"K":2},"l":[{"K":1},{"K":2}]}`), &v); err != nil {
		t.Fatalf("same key in different objects: %v", err)
	}
	if err := DecodeStrict([]byte(`{"l":[{"K":1,"K":2}]}`), &v); err == nil || !strings.Contains(err.Error(), "l[0].K: duplicate key") {
		t.Fatalf("duplicate key in a list element: %v, want VALIDATION naming l[0].K", err)
	}
}

// JSONError names an unknown field by its bare key, so an empty key leaves the
// message without a field: ": unknown field".
func TestDecodeNamesEmptyUnknownField(t *testing.T) {
	_, err := DecodeScopeConfig(strings.NewReader(`{"deploy":{"":1}}`))
	var e *warmpool.Error
	if errors.As(err, &e) && strings.HasPrefix(e.Message, ": ") {
		t.Fatalf(`DecodeScopeConfig({"deploy":{"":1}}) = %q: quote the key (unknown field "") and give its path (deploy."")`, e.Message)
	}
	if err == nil || !strings.Contains(err.Error(), `""`) {
		t.Errorf("error %v does not name the empty field", err)
	}
}

// A body is one JSON object. encoding/json's Decoder.More reports false before a
// stray ']' or '}', so DecodeScopeConfig's trailing-data check lets those through.
func TestDecodeRejectsTrailingCloser(t *testing.T) {
	for _, doc := range []string{`{}]`, `{}}`, `{"pool":{"queue_size":0}}}`} {
		_, err := DecodeScopeConfig(strings.NewReader(doc))
		if err == nil {
			t.Fatalf("DecodeScopeConfig(%q) accepts trailing data: check the decoder is at EOF (dec.Token() == io.EOF), not !dec.More()", doc)
		}
		wantValidation(t, err, "body")
	}
}

// The body must be a JSON object; JSON null decodes to "no change" and would store a
// config of nothing but defaults.
func TestDecodeRejectsNull(t *testing.T) {
	_, err := DecodeScopeConfig(strings.NewReader(`null`))
	if err == nil {
		t.Fatalf(`DecodeScopeConfig("null") succeeds with every default; a body that is not an object should be VALIDATION "body: expected a JSON object"`)
	}
	wantValidation(t, err, "body")
}

func TestDecodeFillsDefaults(t *testing.T) {
	def := warmpool.DefaultScopeConfig()
	t.Run("empty object", func(t *testing.T) {
		if got := mustDecode(t, `{}`); !configsEqual(got, def) {
			t.Errorf("decode {} = %+v\nwant %+v", got, def)
		}
	})
	t.Run("memory missing", func(t *testing.T) {
		got := mustDecode(t, `{"deploy":{"image":"agent:1","resources":{"cpu":"1"}}}`)
		if got.Deploy.Resources.Memory != "512Mi" || got.Deploy.Resources.CPU != "1" {
			t.Errorf("resources = %+v, want cpu 1 and memory 512Mi", got.Deploy.Resources)
		}
	})
	t.Run("empty and null values get the default", func(t *testing.T) {
		got := mustDecode(t, `{"deploy":{"image":"","container_name":" ","resources":{"memory":""},
			"sse_path":"","health_path":"","command":null,"args":null,"env":null},"pool":null}`)
		if !configsEqual(got, def) {
			t.Errorf("decode = %+v\nwant %+v", got, def)
		}
		if got.Deploy.Command == nil || got.Deploy.Args == nil || got.Deploy.Env == nil {
			t.Errorf("nil list left in %+v: stored as null, it would change deploy_ver", got.Deploy)
		}
	})
	t.Run("explicit zero kept", func(t *testing.T) {
		got := mustDecode(t, `{"pool":{"queue_size":0,"wait_timeout_s":0,"min_idle_pods":0,"max_parallel_deploys":0}}`)
		if p := got.Pool; p.QueueSize != 0 || p.WaitTimeoutS != 0 || p.MinIdlePods != 0 || p.MaxParallelDeploys != 0 {
			t.Errorf("explicit zeros replaced: %+v", p)
		}
	})
	t.Run("given values kept", func(t *testing.T) {
		got := mustDecode(t, `{"deploy":{"image":"agent:2","namespace":"agents","port":9000,"env":{"K":"V"}},
			"pool":{"max_concurrency":10,"pod_concurrency":3,"min_idle_pods":1}}`)
		d, p := got.Deploy, got.Pool
		if d.Image != "agent:2" || d.Namespace != "agents" || d.Port != 9000 || d.Env["K"] != "V" ||
			p.MaxConcurrency != 10 || p.PodConcurrency != 3 || p.MinIdlePods != 1 || p.MaxPods() != 4 {
			t.Errorf("decode lost a value: %+v", got)
		}
	})
}

// FuzzDecodeScopeConfig: any body either fails with a VALIDATION *warmpool.Error that names a
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
		`{"deploy":{"pod_template":{"spec":{"containers":[{"name":"agent","image":"a:1","resources":{"requests":{"cpu":"1"}}}]}}}}`,
		`{"deploy":{"pod_template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"agent","env":[{"name":"A","value":"1"}]}]}}}}`,
		`{"deploy":{"pod_template":null}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		cfg, err := DecodeScopeConfig(bytes.NewReader(body))
		if err != nil {
			var e *warmpool.Error
			if !errors.As(err, &e) || e.Code != warmpool.CodeValidation {
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

package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/cputime"
)

// strictBody is a body of each kind of JSON DecodeStrict meets: plain fields, maps
// (whose keys are data), lists of structs, a struct within and an embedded one.
type strictBody struct {
	SessionID string                  `json:"session_id"`
	RequestID string                  `json:"request_id"`
	N         int                     `json:"n"`
	O         map[string]int          `json:"o"`
	P         map[string]int          `json:"p"`
	L         []strictItem            `json:"l"`
	M         map[string][]strictItem `json:"m"`
	In        struct {
		Name string `json:"name"`
		strictEmbedded
	} `json:"in"`
}

type strictItem struct {
	K int // no tag: encoding/json's name is the Go name, K
}

type strictEmbedded struct {
	Tag string `json:"tag"`
}

// strictSchema is strictBody's field names, written out by hand for the reference
// reading of FuzzDecodeStrict (nil: nothing to check below).
var strictSchema = func() *shape {
	item := &shape{fields: map[string]*shape{"K": nil}}
	return &shape{fields: map[string]*shape{
		"session_id": nil, "request_id": nil, "n": nil, "o": {}, "p": {},
		"l": {elem: item}, "m": {elem: &shape{elem: item}},
		"in": {fields: map[string]*shape{"name": nil, "tag": nil}},
	}}
}()

// nest is a body of depth levels: an object holding lists.
func nest(depth int) string {
	return `{"l":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + "}"
}

// nestKeys is depth objects, one in the other, each under key.
func nestKeys(key string, depth int) string {
	return strings.Repeat(`{"`+key+`":`, depth) + "1" + strings.Repeat("}", depth)
}

// wantFault requires a VALIDATION *Error whose message contains msg.
func wantFault(tb testing.TB, doc string, err error, msg string) {
	tb.Helper()
	var e *warmpool.Error
	if !errors.As(err, &e) || e.Code != warmpool.CodeValidation || !strings.Contains(e.Message, msg) {
		tb.Fatalf("decode %.80q: %v, want VALIDATION with %q", doc, err, msg)
	}
}

// SPEC §11.5: JSON nested deeper than 32 levels is a 400, lists and objects alike.
func TestDecodeStrictDepth(t *testing.T) {
	var v struct {
		L any `json:"l"`
	}
	for _, doc := range []string{nest(32), `{"l":` + nestKeys("a", 31) + `}`} {
		if err := DecodeStrict([]byte(doc), &v); err != nil {
			t.Fatalf("32 levels refused: %v", err)
		}
	}
	for _, doc := range []string{nest(33), `{"l":` + nestKeys("a", 32) + `}`, nest(10000), `{"l":` + strings.Repeat("[", 40)} {
		wantFault(t, doc, DecodeStrict([]byte(doc), &v), "body: JSON nested deeper than 32 levels")
	}
	doc := `{"deploy":{"env":` + nestKeys("A", 31) + `}}`
	_, err := DecodeScopeConfig(strings.NewReader(doc))
	wantFault(t, doc, err, "body: JSON nested deeper than 32 levels")
}

// SPEC §11.5: field names match exactly. encoding/json folds case, so without the
// check {"SESSION_ID":"bob"} after {"session_id":"alice"} binds bob. Map keys are data
// and keep their case.
func TestDecodeStrictExactNames(t *testing.T) {
	for _, tc := range []struct{ doc, msg string }{
		{`{"session_id":"alice","SESSION_ID":"bob"}`, "SESSION_ID: unknown field (field names are case-sensitive: session_id)"},
		{`{"Session_Id":"bob"}`, "Session_Id: unknown field"},
		{`{"in":{"Name":"x"}}`, "in.Name: unknown field (field names are case-sensitive: name)"},
		{`{"in":{"TAG":"x"}}`, "in.TAG: unknown field"},
		{`{"l":[{"K":1},{"k":2}]}`, "l[1].k: unknown field (field names are case-sensitive: K)"},
		{`{"m":{"a":[{"K":1}],"b":[{"k":2}]}}`, "m.b[0].k: unknown field"},
		{`{"strictEmbedded":{}}`, "strictEmbedded: unknown field"},
		{`{"bogus":1}`, "bogus: unknown field"},
	} {
		var v strictBody
		wantFault(t, tc.doc, DecodeStrict([]byte(tc.doc), &v), tc.msg)
	}
	var v strictBody
	doc := `{"session\u005fid":"s1","o":{"A":1,"a":2},"in":{"name":"n","tag":"t"},"l":[{"K":3}]}`
	if err := DecodeStrict([]byte(doc), &v); err != nil {
		t.Fatal(err)
	}
	if v.SessionID != "s1" || len(v.O) != 2 || v.O["a"] != 2 || v.In.Name != "n" || v.In.Tag != "t" || v.L[0].K != 3 {
		t.Fatalf("decoded %+v", v)
	}
	for _, tc := range []struct{ doc, msg string }{
		{`{"deploy":{"Image":"x"}}`, "deploy.Image: unknown field (field names are case-sensitive: image)"},
		{`{"Deploy":{}}`, "Deploy: unknown field"},
		{`{"deploy":{"resources":{"CPU":"1"}}}`, "deploy.resources.CPU: unknown field"},
	} {
		_, err := DecodeScopeConfig(strings.NewReader(tc.doc))
		wantFault(t, tc.doc, err, tc.msg)
	}
	cfg, err := DecodeScopeConfig(strings.NewReader(`{"deploy":{"env":{"A":"1","a":"2"}}}`))
	if err != nil || len(cfg.Deploy.Env) != 2 {
		t.Fatalf("env names that differ in case: %v, %v", cfg.Deploy.Env, err)
	}
}

// An object of more keys than smallObject keeps them in a set: a key given twice is
// found wherever it is.
func TestDecodeStrictDuplicateInLargeObject(t *testing.T) {
	keys := func(n int) []string {
		var ks []string
		for i := range n {
			ks = append(ks, fmt.Sprintf(`"k%d":%d`, i, i))
		}
		return ks
	}
	var v struct {
		O map[string]int `json:"o"`
	}
	for _, n := range []int{smallObject - 1, smallObject, smallObject + 1, 200} {
		if doc := `{"o":{` + strings.Join(keys(n), ",") + `}}`; DecodeStrict([]byte(doc), &v) != nil || len(v.O) != n {
			t.Fatalf("%d distinct keys: %v", n, DecodeStrict([]byte(doc), &v))
		}
		for _, dup := range []int{0, n - 1} {
			doc := `{"o":{` + strings.Join(append(keys(n), fmt.Sprintf(`"k%d":0`, dup)), ",") + `}}`
			wantFault(t, doc, DecodeStrict([]byte(doc), &v), fmt.Sprintf("o.k%d: duplicate key", dup))
		}
	}
	// Two spellings of one key, and two invalid UTF-8 keys that encoding/json reads alike.
	for _, doc := range []string{`{"o":{"a":1,"\u0061":2}}`, "{\"o\":{\"\xff\":1,\"\xfe\":2}}"} {
		wantFault(t, doc, DecodeStrict([]byte(doc), &v), "duplicate key")
	}
}

// strictFault is a reference reading of doc, by encoding/json's own tokens: what is
// wrong with it for DecodeStrict into strictBody, or "" when nothing is.
func strictFault(doc []byte) string {
	if !json.Valid(doc) {
		return "malformed"
	}
	if t := bytes.TrimSpace(doc); t[0] != '{' {
		return "not an object"
	}
	type level struct {
		s       *shape
		seen    map[string]bool // nil in a list
		wantKey bool
		child   *shape // the shape of the value after the key just read
	}
	var stack []*level
	dec := json.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		var top *level
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.wantKey {
			if tok == json.Delim('}') {
				stack = stack[:len(stack)-1]
				continue
			}
			key := tok.(string)
			if top.seen[key] {
				return "duplicate " + key
			}
			top.seen[key] = true
			top.wantKey, top.child = false, nil
			if top.s != nil {
				if top.s.fields == nil {
					top.child = top.s.elem
				} else if c, ok := top.s.fields[key]; ok {
					top.child = c
				} else {
					return "unknown " + key
				}
			}
			continue
		}
		var s *shape // the shape of this value
		if top != nil {
			if top.seen != nil {
				s, top.wantKey = top.child, true
			} else if top.s != nil {
				s = top.s.elem
			}
		} else {
			s = strictSchema
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) == maxDepth {
				return "too deep"
			}
			l := &level{s: s}
			if tok == json.Delim('{') {
				l.seen, l.wantKey = map[string]bool{}, true
			}
			stack = append(stack, l)
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].seen != nil {
				stack[len(stack)-1].wantKey = true
			}
		}
	}
}

// FuzzDecodeStrict: DecodeStrict, one pass over the bytes, refuses a body exactly when
// a reference reading by encoding/json's own tokens finds it malformed, not an object,
// nested deeper than 32 levels, with a key twice in one object or a field name that is
// not exact, or when encoding/json cannot decode its values; a body it takes decodes to
// what encoding/json makes of it, and an error names a field or the body.
func FuzzDecodeStrict(f *testing.F) {
	for _, seed := range []string{
		``, ` `, `{}`, `null`, `[]`, `{}]`, `{} {}`, `{"session_id":"s1"}`,
		`{"session_id":"s1","request_id":"r1"}`, ` {"request_id":"r1","n":2} `,
		`{"session_id":"s1","session_id":"s2"}`, `{"session_id":"s1","session\u005fid":"s2"}`,
		`{"o":{"k":1,"k":2}}`, `{"o":{"k":1},"p":{"k":1}}`, `{"session_id":"a","request_id":"a"}`,
		"{\"\xff\":1,\"\xfe\":2}", `{"bogus":1}`, `{"n":"1"}`, `{"session_id":"s1"`, `{"a":"b","c":"d","e":"f","g":"h","i":"j"}`,
		`{"session_id":"alice","SESSION_ID":"bob"}`, `{"in":{"Name":"x","tag":"t"}}`, `{"l":[{"K":1},{"k":2}]}`,
		`{"o":{"A":1,"a":2}}`, `{"m":{"x":[{"K":1}]}}`, `{"n":-0.5e+3}`, `{"n":01}`, `{"n":1.}`, `{"session_id":"\ud800"}`,
		`{"session_id":"a\tb"}`, `{": "`, `{"a.b":{": ":1}}`, `{"o":{"\u00e9":1,"é":2}}`, nest(32), nest(33), `{"l":` + nestKeys("a", 31) + `}`,
		`{"o":{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k3":3}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var got, want strictBody
		err := DecodeStrict(doc, &got)
		fault := strictFault(doc)
		if fault == "" {
			if jerr := json.Unmarshal(doc, &want); jerr != nil {
				fault = "value: " + jerr.Error()
			}
		}
		if (err == nil) != (fault == "") {
			t.Fatalf("DecodeStrict(%q) = %v; the reference reading finds %q", doc, err, fault)
		}
		if err == nil {
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("DecodeStrict(%q) = %+v, encoding/json %+v", doc, got, want)
			}
			return
		}
		var e *warmpool.Error
		if !errors.As(err, &e) || e.Code != warmpool.CodeValidation {
			t.Fatalf("error %v (%T) is not a VALIDATION *Error", err, err)
		}
		if field, _, ok := strings.Cut(e.Message, ": "); !ok || field == "" {
			t.Fatalf("error %q does not start with a field name", e.Message)
		}
	})
}

// The allocation bound of FuzzDecodeAllocs: one decode allocates at most allocPerByte
// bytes per byte of body, plus a base of its own.
const allocPerByte = 32

// FuzzDecodeAllocs: the memory of one decode, by DecodeStrict or DecodeScopeConfig, is
// linear in its body whatever the body holds (deep nesting, long keys, many keys, case
// variants, errors), and the answer is nil or a VALIDATION *Error, never a panic. The
// path to each open level used to be kept, key length x depth squared: 1.5 GB for the
// 350 KB body of nested 30-character keys below.
func FuzzDecodeAllocs(f *testing.F) {
	long := strings.Repeat("k", 30)
	var many strings.Builder
	many.WriteString(`{"o":{`)
	for i := range 2000 {
		fmt.Fprintf(&many, `"key%d":%d,`, i, i)
	}
	many.WriteString(`"key0":0}}`)
	for _, seed := range []string{
		``, `{}`, `{"session_id":"s1"}`, `{"session_id":"alice","SESSION_ID":"bob"}`,
		`{"deploy":{"Image":"x","env":{"A":"1","a":"2"}}}`, `{"Deploy":{"IMAGE":"x"}}`,
		nestKeys(long, 9990), nestKeys("deploy", 9999), nestKeys(long, 32), nestKeys(long, 500),
		`{"deploy":{"env":` + nestKeys(long, 30) + `}}`, nest(33), nest(32), strings.Repeat("[", 10000),
		`{"` + strings.Repeat("k", 100000) + `":1}`, `{"o":{"` + strings.Repeat("é", 5000) + `":1}}`,
		many.String(), `{"l":[` + strings.Repeat(`{"K":1},`, 5000) + `{"K":1,"K":2}]}`,
		`{"deploy":{"env":{` + strings.Repeat(`"A":"1",`, 3000) + `"B":"2"}}}`,
	} {
		f.Add([]byte(seed))
	}
	decoders := []struct {
		name   string
		base   uint64
		decode func([]byte) error
	}{
		{"DecodeStrict", 16 << 10, func(doc []byte) error {
			var v strictBody
			return DecodeStrict(doc, &v)
		}},
		// A config is validated too: its regexps take machines from a sync.Pool, which
		// a garbage collection empties, and a backtracker's is up to 32 KB.
		{"DecodeScopeConfig", 256 << 10, func(doc []byte) error {
			_, err := DecodeScopeConfig(bytes.NewReader(doc))
			return err
		}},
	}
	for _, d := range decoders {
		// What the first call builds once for good (the shapes of types, the regexps'
		// machines) is not a cost of one body.
		_ = d.decode([]byte(`{"deploy":{"image":"a","env":{"A":"1"}},"pool":{},"session_id":"s","SESSION_ID":"s"}`))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		for _, d := range decoders {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := d.decode(doc)
			runtime.ReadMemStats(&after)
			if err != nil {
				var e *warmpool.Error
				if !errors.As(err, &e) || e.Code != warmpool.CodeValidation {
					t.Fatalf("%s: error %v (%T) is not a VALIDATION *Error", d.name, err, err)
				}
			}
			limit := allocPerByte*uint64(len(doc)) + d.base
			if got := after.TotalAlloc - before.TotalAlloc; got > limit {
				t.Fatalf("%s of %d bytes (%.60q...) allocated %d bytes, want at most %d", d.name, len(doc), doc, got, limit)
			}
		}
	})
}

// BenchmarkDecodeStrict measures DecodeStrict on route bodies (docs/performance.md):
// the warm route's body, the same with a request id, and one with an escape (which the
// shortcut for small plain bodies before the one-pass walk could not take). cpu-ns/op
// is the process's CPU time (garbage collection included) per decode, which a busy
// machine inflates less than ns/op.
func BenchmarkDecodeStrict(b *testing.B) {
	type routeRequest struct {
		SessionID string `json:"session_id"`
		RequestID string `json:"request_id"`
	}
	for _, bc := range []struct{ name, body string }{
		{"route", `{"session_id":"s123"}`},
		{"route-request-id", `{"session_id":"s123","request_id":"r-0001"}`},
		{"route-escaped", `{"session_id":"s\u0031"}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			body := []byte(bc.body)
			b.ReportAllocs()
			cpu := cputime.Now(b)
			for b.Loop() {
				var req routeRequest
				if err := DecodeStrict(body, &req); err != nil {
					b.Fatal(err)
				}
			}
			cputime.Report(b, cpu)
		})
	}
}

// plainBody is strictBody without the embedded struct: its shape is exact, and
// DecodeStrict decodes it with json.Unmarshal.
type plainBody struct {
	SessionID string         `json:"session_id"`
	N         int            `json:"n"`
	O         map[string]int `json:"o"`
	L         []strictItem   `json:"l"`
	In        struct {
		Name string `json:"name"`
	} `json:"in"`
	Any any `json:"any"`
}

// TestDecodeStrictExact checks that a type whose shape is exact decodes, and fails,
// as through the Decoder that refuses unknown fields, and that embedding a struct
// anywhere in a type makes its shape not exact.
func TestDecodeStrictExact(t *testing.T) {
	if !shapeOf(reflect.TypeFor[*plainBody]()).exact || shapeOf(reflect.TypeFor[*strictBody]()).exact {
		t.Fatal("plainBody's shape should be exact, strictBody's (an embedded struct within) not")
	}
	for _, doc := range []string{
		`{"session_id":"s1"}`, `{"session_id":1}`, `{"n":"1"}`, `{"n":1.5}`, `{"n":99999999999999999999}`,
		`{"o":{"a":1,"b":"x"}}`, `{"l":[{"K":1},{"K":"y"}]}`, `{"l":[{"k":1}]}`, `{"in":{"name":2}}`,
		`{"in":{"Name":"x"}}`, `{"any":{"x":[1,{"y":null}]}}`, `{"session_id":"s\u0031","n":-3}`,
		`{"session_id":null,"o":null,"l":null}`, `{"x":1}`, `{"session_id":"a"} x`, `{"session_id":"a"`,
	} {
		var got, want plainBody
		err := DecodeStrict([]byte(doc), &got)
		wantErr := checkObject([]byte(doc), shapeOf(reflect.TypeOf(&want)))
		if wantErr == nil {
			dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
			dec.DisallowUnknownFields()
			if e := dec.Decode(&want); e != nil {
				wantErr = warmpool.JSONError(e)
			}
		}
		if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, %v; through the Decoder %+v, %v", doc, got, err, want, wantErr)
		}
	}
}

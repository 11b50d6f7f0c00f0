package server_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// FuzzHTTPDecoders sends random bodies to the three decoding endpoints (PUT config,
// POST sessions, POST pods/acquire) of a complete replica: whatever the body, the answer
// is never a 500 or a panic, and an error is always the envelope. `go test` runs the
// seeds; `go test -fuzz FuzzHTTPDecoders ./server/` explores.
func FuzzHTTPDecoders(f *testing.F) {
	seeds := []string{
		``, ` `, `{`, `}`, `[]`, `null`, `true`, `42`, `"x"`, `{}`, `{}{}`, `{} x`,
		`{"session_id":"s1"}`,
		`{"session_id":"s1","request_id":"r1"}`,
		`{"session_id":"s2","request_id":"r1"}`,
		`{"session_id":1}`,
		`{"session_id":"a b"}`,
		`{"session_id":"a'..redis.call('FLUSHALL')..'"}`,
		`{"session_id":"s1","request_id":"{x}"}`,
		`{"session_id":"` + strings.Repeat("s", 129) + `"}`,
		`{"request_id":"acq-1"}`,
		`{"request_id":null}`,
		`{"deploy":{"image":"registry.example/agent:1.4"}}`,
		`{"deploy":{"resources":{"memory":""}},"pool":{"max_concurrency":4}}`,
		`{"deploy":{"env":{"K":"V","1":"x"}}}`,
		`{"deploy":{"command":null,"args":[""],"env":null,"resources":null}}`,
		`{"pool":{"max_concurrency":1e400}}`,
		`{"pool":{"max_concurrency":9223372036854775807,"pod_concurrency":1}}`,
		`{"pool":{"pod_concurrency":-1}}`,
		`{"pools":{}}`,
		`{"deploy":{"port":"80"}}`,
		"{\"session_id\":\"\xff\"}",
		"\xef\xbb\xbf{}",
		"\x00",
		strings.Repeat("[", 1000),
		strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100),
	}
	for _, s := range seeds {
		f.Add([]byte(s), "")
	}
	f.Add([]byte(`{"session_id":"s3"}`), "key-1")
	f.Add([]byte(`{}`), "a'..redis.call('FLUSHALL')..'")

	e := mustEnv(f)
	e.putScope("fuzz", scopeCfg(8, 2, 0, 1)) // queue_size 0: a full scope answers at once
	h := e.srv.Handler()
	targets := []struct{ method, path string }{
		{http.MethodPut, "/v1/scopes/fuzz-config/config"}, // not the routed scope: a valid body may change it
		{http.MethodPost, "/v1/scopes/fuzz/sessions"},
		{http.MethodPost, "/v1/scopes/fuzz/pods/acquire"},
	}

	f.Fuzz(func(t *testing.T, body []byte, idemKey string) {
		for _, tg := range targets {
			req := httptest.NewRequest(tg.method, tg.path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if idemKey != "" && validHeaderValue(idemKey) {
				req.Header.Set("Idempotency-Key", idemKey)
			}
			rec := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(rec, req)
			r := resp{method: tg.method, path: tg.path, status: rec.Code, header: rec.Header(), raw: rec.Body.Bytes(), took: time.Since(start)}
			if r.status == http.StatusInternalServerError {
				t.Fatalf("500 for body %q: %v", body, r)
			}
			if r.status >= 300 {
				checkEnvelope(t, r)
			} else {
				r.obj(t)
			}
		}
	})
}

// validHeaderValue keeps the fuzzer to header values an HTTP client could send.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

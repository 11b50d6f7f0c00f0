package httpx_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
)

// SPEC §11.5: a call's request id is the body's or the header's; both only when equal,
// the header only once.
func TestIdempotencyKey(t *testing.T) {
	for _, c := range []struct {
		name    string
		body    string
		headers []string
		want    string
		refused string // what the VALIDATION message names; "" when the call is fine
	}{
		{name: "none"},
		{name: "body", body: "r1", want: "r1"},
		{name: "header", headers: []string{"r1"}, want: "r1"},
		{name: "empty header", body: "r1", headers: []string{""}, want: "r1"},
		{name: "both equal", body: "r1", headers: []string{"r1"}, want: "r1"},
		{name: "both differ", body: "r1", headers: []string{"r2"}, refused: "request_id and the Idempotency-Key header differ"},
		{name: "header twice", headers: []string{"r1", "r1"}, refused: "Idempotency-Key: sent 2 times"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/scopes/s/sessions", nil)
			for _, h := range c.headers {
				r.Header.Add(httpx.HeaderIdempotencyKey, h)
			}
			got, err := httpx.IdempotencyKey(r, c.body)
			if c.refused != "" {
				if warmpool.ErrorCode(err) != warmpool.CodeValidation || !strings.Contains(err.Error(), c.refused) {
					t.Fatalf("= %q, %v; want VALIDATION naming %q", got, err, c.refused)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("= %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

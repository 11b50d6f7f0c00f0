package warmpool

import "testing"

// BenchmarkDecodeStrict measures DecodeStrict on route bodies (docs/performance.md):
// the warm route's body, the same with a request id, and one the shortcut for small
// plain bodies cannot take (an escape).
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
			for b.Loop() {
				var req routeRequest
				if err := DecodeStrict(body, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

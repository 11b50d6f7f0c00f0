package httpx

import (
	"net/http"

	"github.com/warmpool/warmpool"
)

// HeaderIdempotencyKey carries the request id of a call that takes one (route,
// acquire) when its body has none.
const HeaderIdempotencyKey = "Idempotency-Key"

// IdempotencyKey returns the request id of a call that takes one: body, the body's
// request_id, else the Idempotency-Key header. A call may send both only when they
// are equal, and the header at most once (SPEC §11.5): with two ids it would be up to
// each reader (a gateway, a log, this server) which one the call has. The id is not
// validated here. Errors: VALIDATION.
func IdempotencyKey(r *http.Request, body string) (string, error) {
	keys := r.Header.Values(HeaderIdempotencyKey)
	if len(keys) > 1 {
		return "", warmpool.Errorf(warmpool.CodeValidation, "%s: sent %d times; send it once", HeaderIdempotencyKey, len(keys))
	}
	header := ""
	if len(keys) == 1 {
		header = keys[0]
	}
	switch {
	case header == "" || header == body:
		return body, nil
	case body == "":
		return header, nil
	}
	return "", warmpool.Errorf(warmpool.CodeValidation,
		"request_id and the %s header differ: send the request id in one of them, or the same in both", HeaderIdempotencyKey)
}

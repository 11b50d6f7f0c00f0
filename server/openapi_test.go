package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/go-chi/chi/v5"

	"github.com/warmpool/warmpool/api"
)

// openAPI is the served document, loaded and validated once for every test.
var openAPI = sync.OnceValues(func() (routers.Router, error) {
	// The pool page's HTML is checked as a string, as the document describes it.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.FileBodyDecoder)
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	// The document's server is an address template; the tests' replicas answer on
	// loopback ports, and requests made in a test may carry only a path. Without
	// servers the router matches the path alone (with them, a request no server
	// matched would read as a path outside the API and go unchecked).
	doc.Servers = nil
	return legacy.NewRouter(doc)
})

// checkResponse validates an answer against the OpenAPI document: its status must be
// documented for the operation and its headers and body must fit the schema. Answers
// to a path or method the document does not have (tests of NOT_FOUND and
// METHOD_NOT_ALLOWED) are not an operation of the API; checkEnvelope covers them.
func checkResponse(tb testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	tb.Helper()
	router, err := openAPI()
	if err != nil {
		tb.Fatalf("openapi.yaml: %v", err)
	}
	route, params, err := router.FindRoute(req)
	var notOp *routers.RouteError
	if errors.As(err, &notOp) && (notOp.Reason == routers.ErrPathNotFound.Error() || notOp.Reason == routers.ErrMethodNotAllowed.Error()) {
		return
	}
	if err != nil {
		tb.Fatalf("%s %s: finding the operation: %v", req.Method, req.URL, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		tb.Fatalf("%s %s -> %d %s: not as openapi.yaml says: %s", req.Method, req.URL, status, bytes.TrimSpace(body), brief(err))
	}
}

// brief says what is wrong in a validation error in one line per fault, without the
// schemas and values kin-openapi's own messages print in full.
func brief(err error) string {
	var re *openapi3filter.ResponseError
	if errors.As(err, &re) {
		if re.Err == nil {
			return re.Reason
		}
		return re.Reason + ": " + brief(re.Err)
	}
	var me openapi3.MultiError
	if errors.As(err, &me) {
		parts := make([]string, 0, len(me))
		for _, e := range me {
			parts = append(parts, brief(e))
		}
		return strings.Join(parts, "; ")
	}
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		return "/" + strings.Join(se.JSONPointer(), "/") + ": " + se.Reason
	}
	return err.Error()
}

// Every route of the router is in the document, and every operation of the document is
// routed.
func TestOpenAPICoversTheRouter(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	var routed []string
	err := chi.Walk(e.srv.Handler().(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		// A sub-router's own path is walked with a trailing slash, which the router
		// refuses (404, see TestNoInternalOnBadInput): the route is the path without it.
		routed = append(routed, method+" "+strings.TrimSuffix(route, "/"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	slices.Sort(routed)
	slices.Sort(documented)
	for _, r := range routed {
		if !slices.Contains(documented, r) {
			t.Errorf("routed, not in openapi.yaml: %s", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routed, d) {
			t.Errorf("in openapi.yaml, not routed: %s", d)
		}
	}
	if len(routed) < 15 {
		t.Fatalf("only %d routes walked: %v", len(routed), routed)
	}
}

// The document is served without a token, as it is embedded.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withToken("gw"))
	r := e.do(http.MethodGet, "/openapi.yaml", nil, header{"Authorization", ""})
	if r.status != http.StatusOK || r.header.Get("Content-Type") != api.ContentType || !bytes.Equal(r.raw, api.OpenAPI) {
		t.Fatalf("GET /openapi.yaml: %d %q", r.status, r.header.Get("Content-Type"))
	}
	if !strings.HasPrefix(string(r.raw), "openapi: 3.1") {
		t.Fatalf("not an OpenAPI 3.1 document: %.40q", r.raw)
	}
}

package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/api"
)

// load parses and validates the document.
func load(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	return doc
}

func TestDocumentIsValid(t *testing.T) {
	doc := load(t)
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.OperationID == "" {
				t.Errorf("%s %s: no operationId", method, path)
			}
			for status, r := range op.Responses.Map() {
				if r.Value.Headers["X-Request-Id"] == nil {
					t.Errorf("%s %s %s: X-Request-Id is not documented", method, path, status)
				}
			}
		}
	}
}

// Every property a schema requires is one it defines (a linter's finding: the
// schema of /openapi.yaml's answer required four it never named).
func TestRequiredPropertiesAreDefined(t *testing.T) {
	doc := load(t)
	seen := map[*openapi3.Schema]bool{}
	var walk func(at string, ref *openapi3.SchemaRef)
	walk = func(at string, ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		for _, name := range s.Required {
			if s.Properties[name] == nil {
				t.Errorf("%s: requires %q, which it does not define", at, name)
			}
		}
		for name, p := range s.Properties {
			walk(at+"."+name, p)
		}
		walk(at+"[]", s.Items)
		walk(at+"{}", s.AdditionalProperties.Schema)
		for _, group := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
			for i, sub := range group {
				walk(fmt.Sprintf("%s/%d", at, i), sub)
			}
		}
	}
	for name, ref := range doc.Components.Schemas {
		walk(name, ref)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody != nil {
				for mt, c := range op.RequestBody.Value.Content {
					walk(method+" "+path+" "+mt, c.Schema)
				}
			}
			for status, r := range op.Responses.Map() {
				for mt, c := range r.Value.Content {
					walk(method+" "+path+" "+status+" "+mt, c.Schema)
				}
			}
		}
	}
	if len(seen) < 30 {
		t.Fatalf("only %d schemas walked", len(seen))
	}
}

// The defaults the document states are the ones the server fills (warmpool's
// DefaultScopeConfig), field by field.
func TestDocumentedDefaults(t *testing.T) {
	doc := load(t)
	raw, err := json.Marshal(warmpool.DefaultScopeConfig())
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	n := compareDefaults(t, "", doc.Components.Schemas["ScopeConfig"].Value, want)
	if n < 20 {
		t.Fatalf("only %d defaults compared", n)
	}
}

// compareDefaults checks the default of every leaf property of schema against the value
// at the same place in want, and returns how many it compared.
func compareDefaults(t *testing.T, path string, schema *openapi3.Schema, want map[string]any) int {
	t.Helper()
	n := 0
	// A field the config leaves out when unset (pod_template, omitempty) is documented
	// as nullable with no default.
	unset := func(prop *openapi3.SchemaRef) bool {
		return prop.Value.Default == nil && prop.Value.Type != nil && prop.Value.Type.Includes("null")
	}
	documented := 0
	for name, prop := range schema.Properties {
		if _, ok := want[name]; ok || !unset(prop) {
			documented++
		}
	}
	if documented != len(want) {
		t.Errorf("%s: %d documented fields, the config has %d", path, documented, len(want))
	}
	for name, prop := range schema.Properties {
		p := name
		if path != "" {
			p = path + "." + name
		}
		w, ok := want[name]
		if !ok {
			if !unset(prop) {
				t.Errorf("%s: documented, not a config field", p)
			}
			continue
		}
		if sub, isObj := w.(map[string]any); isObj && len(prop.Value.Properties) > 0 {
			n += compareDefaults(t, p, prop.Value, sub)
			continue
		}
		if fmt.Sprint(prop.Value.Default) != fmt.Sprint(w) {
			t.Errorf("%s: documented default %v, the server's %v", p, prop.Value.Default, w)
		}
		n++
	}
	return n
}

func TestHandler(t *testing.T) {
	rec := httptest.NewRecorder()
	api.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.yaml", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != api.ContentType || !reflect.DeepEqual(rec.Body.Bytes(), api.OpenAPI) {
		t.Fatalf("GET /openapi.yaml: %d %q, %d bytes", rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len())
	}
}

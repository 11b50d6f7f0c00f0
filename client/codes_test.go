package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestKnowsEveryCodeOfTheServer: every code the server's OpenAPI document lists in the
// error envelope is a Code constant here, so that a code added to the server without
// the client fails this test.
func TestKnowsEveryCodeOfTheServer(t *testing.T) {
	raw, err := os.ReadFile("../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas struct {
				ErrorEnvelope struct {
					Properties struct {
						Error struct {
							Properties struct {
								Code struct {
									Enum []string `json:"enum"`
								} `json:"code"`
							} `json:"properties"`
						} `json:"error"`
					} `json:"properties"`
				} `json:"ErrorEnvelope"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	served := doc.Components.Schemas.ErrorEnvelope.Properties.Error.Properties.Code.Enum
	if len(served) < 10 {
		t.Fatalf("the document's error codes: %q; did its shape change?", served)
	}
	known := codeConstants(t)
	for _, c := range served {
		if !known[c] {
			t.Errorf("the server answers %s; client has no Code constant for it", c)
		}
	}
	if !known[string(CodeQuotaExceeded)] || len(known) < len(served) {
		t.Fatalf("constants %v", known)
	}
}

// codeConstants are the values of the Code constants of errors.go.
func codeConstants(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Code" || len(v.Values) != 1 {
				continue
			}
			lit, ok := v.Values[0].(*ast.BasicLit)
			if !ok {
				t.Fatalf("Code constant %s is no literal", v.Names[0])
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			if Code(s).Error() != s {
				t.Fatalf("Code(%q).Error() = %q", s, Code(s).Error())
			}
			known[s] = true
		}
	}
	return known
}

// Package api is the HTTP layer: Router lists every route and calls the managers
// through small interfaces; the OpenAPI 3.1 document of the API (SPEC §3, §10, §11) is
// embedded so that every replica serves it at GET /openapi.yaml and tests hold the
// server to it.
package api

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the document, as YAML.
//
//go:embed openapi.yaml
var OpenAPI []byte

// ContentType is the media type of the document (RFC 9512).
const ContentType = "application/yaml"

// Handler serves the document.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		_, _ = w.Write(OpenAPI)
	})
}

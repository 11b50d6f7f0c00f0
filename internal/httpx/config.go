package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/warmpool/warmpool"
)

// DecodeScopeConfig reads a scope config document strictly (unknown fields are
// rejected and named, field names match exactly, a key given twice and nesting deeper
// than 32 levels are refused, as by DecodeStrict) and normalizes it: this is how a config enters the system from
// outside (a PUT body). A field the document omits takes its default as
// it decodes; one that is blank or null is filled by Normalize. Every error is a
// VALIDATION *Error; a document with several faults gets them all at once, each named
// by its full path ("deploy.imagee: unknown field; pool.queue_size: ..."), one fault
// per field.
func DecodeScopeConfig(r io.Reader) (warmpool.ScopeConfig, error) {
	raw, err := readObject(r)
	if err != nil {
		return warmpool.ScopeConfig{}, err
	}
	cfg := warmpool.DecodeBase()
	var faults fieldFaults
	decodeFields(raw, reflect.ValueOf(&cfg).Elem(), "", &faults)
	if err := cfg.NormalizeWith(faults); err != nil {
		return warmpool.ScopeConfig{}, err
	}
	return cfg, nil
}

// fieldFaults are the faults the decoder finds, each "field: what is wrong".
type fieldFaults []string

func (f *fieldFaults) add(field, format string, args ...any) {
	*f = append(*f, field+": "+fmt.Sprintf(format, args...))
}

// decodeFields decodes the JSON value raw into v, which must be settable, like
// encoding/json does, but records every fault instead of stopping at the first: each
// unknown field of an object and each value of the wrong type, named by its path
// under path. A field that fails keeps the value it had.
func decodeFields(raw json.RawMessage, v reflect.Value, path string, faults *fieldFaults) {
	if v.Kind() != reflect.Struct {
		if err := json.Unmarshal(raw, v.Addr().Interface()); err != nil {
			faults.add(path, "%s", typeFault(err, v.Type()))
		}
		return
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return // encoding/json leaves a struct alone on null
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		faults.add(cmpOr(path, "body"), "expected an object, got JSON %s", jsonKind(raw))
		return
	}
	t := v.Type()
	for _, key := range slices.Sorted(maps.Keys(obj)) {
		name := keyName([]byte(key))
		if path != "" {
			name = path + "." + name
		}
		i := fieldIndex(t, key)
		if i < 0 {
			faults.add(name, "%s", unknownField([]byte(key), shapeOf(t)))
			continue
		}
		decodeFields(obj[key], v.Field(i), name, faults)
	}
}

// fieldIndex is the index of the field of struct type t that the JSON key names (its
// tag, matched exactly: SPEC §11.5 folds no case), or -1.
func fieldIndex(t reflect.Type, key string) int {
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); tag == key {
			return i
		}
	}
	return -1
}

// typeFault says why a JSON value did not decode into a Go value of type t.
func typeFault(err error, t reflect.Type) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Sprintf("expected %s, got JSON %s", typeErr.Type, typeErr.Value)
	}
	return fmt.Sprintf("expected %s: %s", t, strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names the kind of a well-formed JSON value.
func jsonKind(raw json.RawMessage) string {
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0:
		return "nothing"
	case t[0] == '[':
		return "array"
	case t[0] == '"':
		return "string"
	case t[0] == 't' || t[0] == 'f':
		return "bool"
	case t[0] == 'n':
		return "null"
	}
	return "number"
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

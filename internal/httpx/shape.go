package httpx

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

var (
	shapes          sync.Map // reflect.Type -> *shape
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// shape is what checkObject knows of the Go type a JSON value decodes into: the exact
// JSON names of a struct's fields, or the element type of a map or a list. A nil
// *shape checks nothing below it (an interface, a json.Unmarshaler, a scalar).
type shape struct {
	fields map[string]*shape // a struct's fields by JSON name; nil unless a struct
	elem   *shape            // the values of a map or the elements of a list
	// exact is set on a type's own shape when checkObject refuses every key that
	// encoding/json's DisallowUnknownFields would: no struct in it embeds another,
	// whose fields' names could be ambiguous (see addFields).
	exact bool
}

// child is the shape of the value under key in an object of shape s; ok is false when
// s is a struct without that field.
func (s *shape) child(key []byte) (c *shape, ok bool) {
	switch {
	case s == nil:
		return nil, true
	case s.fields == nil:
		return s.elem, true
	}
	c, ok = s.fields[string(key)]
	return c, ok
}

// shapeOf is the shape of type t, built once per type.
func shapeOf(t reflect.Type) *shape {
	if s, ok := shapes.Load(t); ok {
		return s.(*shape)
	}
	b := buildShape(t, map[reflect.Type]*shape{})
	if b != nil {
		b.exact = !embeds(t, map[reflect.Type]bool{})
	}
	s, _ := shapes.LoadOrStore(t, b)
	return s.(*shape)
}

// embeds reports whether a struct that values of t decode into has an embedded field;
// seen holds the types walked already.
func embeds(t reflect.Type, seen map[reflect.Type]bool) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if seen[t] || reflect.PointerTo(t).Implements(unmarshalerType) {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.Anonymous || embeds(f.Type, seen) {
				return true
			}
		}
	case reflect.Map, reflect.Slice, reflect.Array:
		return embeds(t.Elem(), seen)
	}
	return false
}

// buildShape builds the shape of t; built holds those under construction, for types
// that contain themselves.
func buildShape(t reflect.Type, built map[reflect.Type]*shape) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil // its own decoder reads the object
	}
	if s, ok := built[t]; ok {
		return s
	}
	switch t.Kind() {
	case reflect.Struct:
		s := &shape{fields: map[string]*shape{}}
		built[t] = s
		addFields(s, t, built, map[reflect.Type]bool{})
		return s
	case reflect.Map, reflect.Slice, reflect.Array:
		s := &shape{}
		built[t] = s
		s.elem = buildShape(t.Elem(), built)
		return s
	}
	return nil
}

// addFields adds the fields of struct t to s by the names encoding/json gives them (the
// tag's name, else the Go name), those of embedded structs without a name included.
// A field that encoding/json would drop for an ambiguous name is kept: DecodeStrict's
// decoder refuses it as unknown all the same.
func addFields(s *shape, t reflect.Type, built map[reflect.Type]*shape, embedded map[reflect.Type]bool) {
	embedded[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if ft := f.Type; f.Anonymous && name == "" {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if !embedded[ft] {
					addFields(s, ft, built, embedded)
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, ok := s.fields[name]; !ok {
			s.fields[name] = buildShape(f.Type, built)
		}
	}
}

// unknownField says that key is no field of the struct of shape s, and which field it
// would have been with its case folded, as encoding/json alone would have taken it.
func unknownField(key []byte, s *shape) string {
	for name := range s.fields {
		if bytes.EqualFold([]byte(name), key) {
			return fmt.Sprintf("unknown field (field names are case-sensitive: %s)", name)
		}
	}
	return "unknown field"
}

package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/warmpool/warmpool"
)

// The strict decoding of request bodies (SPEC §11.5): one pass over the bytes finds
// what encoding/json would let through (nesting deeper than maxDepth, a key given twice
// in one object, a field name that matches only when case is folded) before
// encoding/json decodes the values. That pass allocates nothing for a body of plain
// keys and few per object, and builds the path of a key only for its error, so its
// memory is linear in the body whatever the nesting.

// maxDepth is how deeply the objects and lists of a body may nest: {} is one level.
const maxDepth = 32

// smallObject is how many keys of one object are compared one by one for duplicates;
// an object with more gets a set, so that many keys cost linear time.
const smallObject = 16

// DecodeStrict decodes the JSON object doc into v: unknown fields (a field name
// matches exactly, never with its case folded), a key given twice in one object,
// nesting deeper than 32 levels, a document that is not an object and trailing data
// are VALIDATION errors naming what is wrong.
func DecodeStrict(doc []byte, v any) error {
	s := shapeOf(reflect.TypeOf(v))
	if err := checkObject(doc, s); err != nil {
		return err
	}
	if s != nil && s.exact {
		// checkObject refused the unknown fields already: json.Unmarshal decodes
		// without a Decoder's two allocations and its copy of doc (800 bytes).
		if err := json.Unmarshal(doc, v); err != nil {
			return warmpool.JSONError(err)
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return warmpool.JSONError(err)
	}
	return nil
}

// readObject reads one JSON object from r and checks it as DecodeStrict does, but for
// field names: the caller decodes the fields and names every fault.
func readObject(r io.Reader) ([]byte, error) {
	doc, err := io.ReadAll(r)
	if err != nil {
		return nil, warmpool.Errorf(warmpool.CodeValidation, "body: %v", err)
	}
	if err := checkObject(doc, nil); err != nil {
		return nil, err
	}
	return doc, nil
}

// errSyntax stops the walk at malformed JSON; encoding/json then words the error.
var errSyntax = errors.New("malformed JSON")

// walker reads one JSON document, keeping only what an error must name: the key or
// index of each open level. The keys of an open object are kept by its own call of
// object. Nothing here is appended through the walker: escape analysis would move it
// and its array to the heap.
type walker struct {
	doc   []byte
	i     int
	depth int            // the open objects and lists
	path  [maxDepth]step // path[:depth-1]: where each open level below the top is
}

// step is one level of a path: a key in an object, or an index in a list.
type step struct {
	key   []byte // nil in a list
	index int
}

// checkObject checks that doc is one well-formed JSON object of at most maxDepth
// levels, with no key given twice in one object and, where s says a value decodes
// into a struct, only keys that are the exact names of its fields.
func checkObject(doc []byte, s *shape) error {
	w := walker{doc: doc}
	w.space()
	switch {
	case w.i == len(doc):
		return warmpool.Errorf(warmpool.CodeValidation, "body: empty, expected a JSON object")
	case doc[w.i] != '{':
		return warmpool.Errorf(warmpool.CodeValidation, "body: expected a JSON object")
	}
	err := w.object(s)
	if err == nil {
		if w.space(); w.i < len(doc) {
			return warmpool.Errorf(warmpool.CodeValidation, "body: trailing data after the JSON document")
		}
		return nil
	}
	if err != errSyntax {
		return err
	}
	var raw json.RawMessage
	if err := json.NewDecoder(bytes.NewReader(doc)).Decode(&raw); err != nil {
		return warmpool.JSONError(err)
	}
	return warmpool.Errorf(warmpool.CodeValidation, "body: malformed JSON at offset %d", w.i)
}

func (w *walker) space() {
	for w.i < len(w.doc) {
		switch w.doc[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// next skips white space and returns the next byte, or 0 at the end.
func (w *walker) next() byte {
	if w.space(); w.i < len(w.doc) {
		return w.doc[w.i]
	}
	return 0
}

// value reads one JSON value that decodes into shape s.
func (w *walker) value(s *shape) error {
	switch c := w.next(); {
	case c == '{':
		return w.object(s)
	case c == '[':
		return w.list(s)
	case c == '"':
		_, _, err := w.str()
		return err
	case c == 't':
		return w.literal("true")
	case c == 'f':
		return w.literal("false")
	case c == 'n':
		return w.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return w.number()
	}
	return errSyntax
}

// open enters an object or a list at w.i, refusing one level too many.
func (w *walker) open() error {
	if w.depth == maxDepth {
		return warmpool.Errorf(warmpool.CodeValidation, "body: JSON nested deeper than %d levels (at offset %d)", maxDepth, w.i)
	}
	w.depth++
	w.i++
	return nil
}

// enter notes where the value about to be read is: under key, or at index in a list.
func (w *walker) enter(st step) { w.path[w.depth-1] = st }

func (w *walker) object(s *shape) error {
	if err := w.open(); err != nil {
		return err
	}
	// The keys read so far: the first smallObject compared one by one, then a set.
	var keys [smallObject][]byte
	n := 0
	var set map[string]struct{}
	if w.next() == '}' {
		w.i++
		w.depth--
		return nil
	}
	for {
		if w.next() != '"' {
			return errSyntax
		}
		key, err := w.key()
		if err != nil {
			return err
		}
		if seen(key, keys[:n], set) {
			return w.fault(key, "duplicate key")
		}
		child, ok := s.child(key)
		if !ok {
			return w.fault(key, unknownField(key, s))
		}
		switch {
		case n < smallObject:
			keys[n] = key
			n++
		case set == nil:
			set = make(map[string]struct{}, 2*smallObject)
			for _, k := range keys {
				set[string(k)] = struct{}{}
			}
			fallthrough
		default:
			set[string(key)] = struct{}{}
		}
		if w.next() != ':' {
			return errSyntax
		}
		w.i++
		w.enter(step{key: key})
		if err := w.value(child); err != nil {
			return err
		}
		switch w.next() {
		case ',':
			w.i++
		case '}':
			w.i++
			w.depth--
			return nil
		default:
			return errSyntax
		}
	}
}

// seen reports whether key is among keys or in set.
func seen(key []byte, keys [][]byte, set map[string]struct{}) bool {
	if set != nil {
		if _, ok := set[string(key)]; ok {
			return true
		}
	}
	for _, k := range keys {
		if bytes.Equal(k, key) {
			return true
		}
	}
	return false
}

func (w *walker) list(s *shape) error {
	if err := w.open(); err != nil {
		return err
	}
	if w.next() == ']' {
		w.i++
		w.depth--
		return nil
	}
	var elem *shape
	if s != nil {
		elem = s.elem
	}
	for n := 0; ; n++ {
		w.enter(step{index: n})
		if err := w.value(elem); err != nil {
			return err
		}
		switch w.next() {
		case ',':
			w.i++
		case ']':
			w.i++
			w.depth--
			return nil
		default:
			return errSyntax
		}
	}
}

// key reads a string at w.i and returns its value as encoding/json reads it: escapes
// resolved and invalid UTF-8 replaced, so that two spellings of one key are one key.
func (w *walker) key() ([]byte, error) {
	start := w.i
	raw, plain, err := w.str()
	if err != nil || plain {
		return raw, err
	}
	// A copy: handing w.doc itself to encoding/json would move the walker's arrays
	// to the heap (escape analysis follows the walker, not its fields).
	lit := make([]byte, w.i-start)
	copy(lit, w.doc[start:w.i])
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return nil, errSyntax
	}
	return []byte(s), nil
}

// str reads a string at w.i: raw is what is between the quotes, plain that it is its
// value too (no escapes, valid UTF-8).
func (w *walker) str() (raw []byte, plain bool, err error) {
	w.i++
	start, plain := w.i, true
	for w.i < len(w.doc) {
		c := w.doc[w.i]
		switch {
		case c == '"':
			raw = w.doc[start:w.i]
			w.i++
			return raw, plain && utf8.Valid(raw), nil
		case c < 0x20:
			return nil, false, errSyntax
		case c == '\\':
			plain = false
			w.i++
			if w.i == len(w.doc) {
				return nil, false, errSyntax
			}
			switch w.doc[w.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				w.i++
			case 'u':
				if w.i+5 > len(w.doc) {
					return nil, false, errSyntax
				}
				for _, h := range w.doc[w.i+1 : w.i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return nil, false, errSyntax
					}
				}
				w.i += 5
			default:
				return nil, false, errSyntax
			}
		default:
			w.i++
		}
	}
	return nil, false, errSyntax
}

func (w *walker) literal(lit string) error {
	if !bytes.HasPrefix(w.doc[w.i:], []byte(lit)) {
		return errSyntax
	}
	w.i += len(lit)
	return nil
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (w *walker) number() error {
	if w.doc[w.i] == '-' {
		w.i++
	}
	switch {
	case w.i < len(w.doc) && w.doc[w.i] == '0':
		w.i++
	case !w.digits():
		return errSyntax
	}
	if w.i < len(w.doc) && w.doc[w.i] == '.' {
		w.i++
		if !w.digits() {
			return errSyntax
		}
	}
	if w.i < len(w.doc) && (w.doc[w.i] == 'e' || w.doc[w.i] == 'E') {
		w.i++
		if w.i < len(w.doc) && (w.doc[w.i] == '+' || w.doc[w.i] == '-') {
			w.i++
		}
		if !w.digits() {
			return errSyntax
		}
	}
	return nil
}

// digits skips a run of decimal digits and reports whether there was one.
func (w *walker) digits() bool {
	start := w.i
	for w.i < len(w.doc) && w.doc[w.i] >= '0' && w.doc[w.i] <= '9' {
		w.i++
	}
	return w.i > start
}

// fault is the VALIDATION error of key, in the current object: its path, then what.
func (w *walker) fault(key []byte, what string) error {
	var b strings.Builder
	for _, st := range w.path[:w.depth-1] {
		if st.key == nil {
			fmt.Fprintf(&b, "[%d]", st.index)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(keyName(st.key))
	}
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	b.WriteString(keyName(key))
	return warmpool.Errorf(warmpool.CodeValidation, "%s: %s", b.String(), what)
}

// keyName is how a path names a key: as it is when it is a plain name, else quoted
// (the empty key as ""), so that no key reads as a path or as the end of one.
func keyName(key []byte) string {
	for _, c := range key {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return strconv.Quote(string(key))
		}
	}
	if len(key) == 0 {
		return `""`
	}
	return string(key)
}

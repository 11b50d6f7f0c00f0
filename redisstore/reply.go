package redisstore

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/warmpool/warmpool"
)

// reply is a script's answer, read field by field. Every read checks that the field
// is there and has the type asked for; the first field that is missing or of another
// type makes the whole reply malformed, and err reports it as INTERNAL. A malformed
// answer therefore never reads as a zero value, and no read panics: callers read what
// they need and check err once.
type reply struct {
	script string
	fields []any
	bad    error
}

// newReply wraps the answer of script: an array is its fields, any other value
// (an integer reply) is its one field.
func newReply(script string, v any) *reply {
	fields, ok := v.([]any)
	if !ok {
		fields = []any{v}
	}
	return &reply{script: script, fields: fields}
}

// err is the first malformation found, nil when every read succeeded.
func (r *reply) err() error { return r.bad }

// fail records a malformation (only the first one counts).
func (r *reply) fail(format string, args ...any) {
	if r.bad == nil {
		r.bad = &warmpool.Error{Code: warmpool.CodeInternal,
			Message: fmt.Sprintf("%s: malformed reply %v: %s", r.script, r.fields, fmt.Sprintf(format, args...))}
	}
}

func (r *reply) field(i int) (any, bool) {
	if i >= len(r.fields) {
		r.fail("%d fields, want at least %d", len(r.fields), i+1)
		return nil, false
	}
	return r.fields[i], true
}

// str reads a string field.
func (r *reply) str(i int) string {
	v, ok := r.field(i)
	if !ok {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		r.fail("field %d is %T, want a string", i+1, v)
	}
	return s
}

// oneOf reads a string field that must be one of known: the kind of an answer.
func (r *reply) oneOf(i int, known ...string) string {
	s := r.str(i)
	if r.bad == nil && !slices.Contains(known, s) {
		r.fail("field %d is %q, want one of %q", i+1, s, known)
	}
	return s
}

// int reads an integer field: an integer reply, or a string of decimal digits.
func (r *reply) int(i int) int64 {
	v, ok := r.field(i)
	if !ok {
		return 0
	}
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			r.fail("field %d is %q, want an integer", i+1, x)
		}
		return n
	}
	r.fail("field %d is %T, want an integer", i+1, v)
	return 0
}

// count reads a non-negative integer field.
func (r *reply) count(i int) int {
	n := r.int(i)
	if n < 0 {
		r.fail("field %d is %d, want a count", i+1, n)
		return 0
	}
	return int(n)
}

// time reads a time in milliseconds since the epoch: an integer, or a string of a
// number as Redis formats a sorted-set score.
func (r *reply) time(i int) time.Time {
	v, ok := r.field(i)
	if !ok {
		return time.Time{}
	}
	switch x := v.(type) {
	case int64:
		return time.UnixMilli(x)
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err != nil {
			r.fail("field %d is %q, want milliseconds", i+1, x)
		}
		return time.UnixMilli(int64(f))
	}
	r.fail("field %d is %T, want milliseconds", i+1, v)
	return time.Time{}
}

// flag reads a boolean field written as 1 or 0 (integer or string).
func (r *reply) flag(i int) bool {
	v, ok := r.field(i)
	if !ok {
		return false
	}
	switch v {
	case int64(1), "1":
		return true
	case int64(0), "0":
		return false
	}
	r.fail("field %d is %v, want 1 or 0", i+1, v)
	return false
}

// strs reads every field from i on as strings.
func (r *reply) strs(from int) []string {
	if from > len(r.fields) {
		r.fail("%d fields, want at least %d", len(r.fields), from)
		return nil
	}
	out := make([]string, 0, len(r.fields)-from)
	for i := from; i < len(r.fields); i++ {
		out = append(out, r.str(i))
	}
	return out
}

// json decodes a JSON string field into v.
func (r *reply) json(i int, v any) {
	if err := json.Unmarshal([]byte(r.str(i)), v); err != nil {
		r.fail("field %d: %v", i+1, err)
	}
}

// pod reads a pod id and its JSON record.
func (r *reply) pod(id, info int) warmpool.Pod {
	p, err := decodePod(r.str(id), r.str(info))
	if err != nil {
		r.fail("%v", err)
	}
	return p
}

// decodePod reads a pod's JSON record, as pod_register.lua and pod_adopt.lua keep it
// in a scope's podinfo HASH.
func decodePod(id, raw string) (warmpool.Pod, error) {
	var p warmpool.Pod
	if raw == "" {
		return p, fmt.Errorf("pod %q has no info", id)
	}
	if !decodePlainPod(raw, &p) {
		p = warmpool.Pod{}
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			return p, fmt.Errorf("pod %q info: %w", id, err)
		}
	}
	p.ID = id
	return p, nil
}

// decodePlainPod decodes a pod record as json.Marshal writes it without anything to
// escape, which is every record a replica writes unless a URL has one of &<> in it: a
// flat object of the Pod's exact field names with strings of printable UTF-8 without
// a backslash and integers. It reports false for anything else, for json.Unmarshal to
// decode (and to word an error). A warm route decodes its pod's record every time,
// and encoding/json took a tenth of its CPU to do so. The strings of p are cut from
// raw.
func decodePlainPod(raw string, p *warmpool.Pod) bool {
	if len(raw) < 2 || raw[0] != '{' || raw[len(raw)-1] != '}' {
		return false
	}
	i := 1
	if raw[i] == '}' {
		return i+1 == len(raw)
	}
	for {
		key, ok := plainString(raw, &i)
		if !ok || i >= len(raw) || raw[i] != ':' {
			return false
		}
		i++
		var s *string
		var n *int64
		switch key {
		case "pod_id":
			s = &p.ID
		case "scope_id":
			s = &p.ScopeID
		case "deploy_ver":
			s = &p.DeployVer
		case "namespace":
			s = &p.Namespace
		case "pod_sse_url":
			s = &p.SSEURL
		case "health_url":
			s = &p.HealthURL
		case "fence":
			n = &p.Fence
		case "created_at":
			n = &p.CreatedAt
		default:
			return false
		}
		if s != nil {
			if *s, ok = plainString(raw, &i); !ok {
				return false
			}
		} else if *n, ok = plainInt(raw, &i); !ok {
			return false
		}
		if i >= len(raw) {
			return false
		}
		switch raw[i] {
		case ',':
			i++
		case '}':
			return i+1 == len(raw)
		default:
			return false
		}
	}
}

// plainString reads the JSON string at raw[*i] that has no escape and only printable
// UTF-8, and moves *i past it.
func plainString(raw string, i *int) (string, bool) {
	if *i >= len(raw) || raw[*i] != '"' {
		return "", false
	}
	start := *i + 1
	for j := start; j < len(raw); j++ {
		switch c := raw[j]; {
		case c == '"':
			s := raw[start:j]
			*i = j + 1
			return s, utf8.ValidString(s)
		case c == '\\' || c < 0x20:
			return "", false
		}
	}
	return "", false
}

// plainInt reads the JSON integer at raw[*i] that fits an int64 (an optional minus,
// then 0 or digits without a leading 0), and moves *i past it.
func plainInt(raw string, i *int) (int64, bool) {
	start, j := *i, *i
	if j < len(raw) && raw[j] == '-' {
		j++
	}
	digits := j
	for j < len(raw) && raw[j] >= '0' && raw[j] <= '9' {
		j++
	}
	if j == digits || raw[digits] == '0' && j > digits+1 {
		return 0, false
	}
	n, err := strconv.ParseInt(raw[start:j], 10, 64)
	*i = j
	return n, err == nil
}

// backoff reads a refill backoff from fields i (failures), i+1 (until) and i+2 (the
// last error).
func (r *reply) backoff(i int) Backoff {
	return Backoff{Failures: r.count(i), Until: r.time(i + 1), LastError: r.str(i + 2)}
}

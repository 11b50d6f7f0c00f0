package e2b

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/redisstore"
)

// The list's bounds: E2B's page size (limit, 1 to 100, 100 by default), and how many
// records a page reads from the store at a time.
const (
	maxPage   = 100
	scanBatch = 100
)

// listQuery is what a list asks for (E2B's query of GET /v2/sandboxes).
type listQuery struct {
	asc      bool
	after    redisstore.SandboxCursor
	limit    int
	template string
	since    time.Time
	metadata map[string]string
	// none: the states asked for leave out running, the only state warmpool's
	// sandboxes are in.
	none bool
}

// listPage answers GET /v2/sandboxes: a page of the live sandboxes, newest first
// unless order=asc, filtered by metadata, template and startedAfter; X-Next-Token
// names the next page when there is one. 200 [ListedSandbox].
func (s *Server) listPage(w http.ResponseWriter, r *http.Request) error {
	q, err := parseList(r.URL.Query(), true)
	if err != nil {
		return err
	}
	out, next, err := s.list(r.Context(), q)
	if err != nil {
		return err
	}
	if next != nil {
		w.Header().Set("X-Next-Token", encodeToken(*next))
	}
	return httpx.OK(w, out)
}

// listAll answers GET /sandboxes (E2B's deprecated list): every live sandbox, newest
// first, filtered by metadata. 200 [ListedSandbox].
func (s *Server) listAll(w http.ResponseWriter, r *http.Request) error {
	q, err := parseList(r.URL.Query(), false)
	if err != nil {
		return err
	}
	all := []listedJSON{}
	for {
		page, next, err := s.list(r.Context(), q)
		if err != nil {
			return err
		}
		all = append(all, page...)
		if next == nil {
			return httpx.OK(w, all)
		}
		q.after = *next
	}
}

// list reads one page: it scans the records in order from the query's cursor, keeps
// those the filters take whose session lives (the records of gone ones are dropped),
// and stops when it has one more than the page, whose predecessor's cursor is the
// next page's.
func (s *Server) list(ctx context.Context, q listQuery) ([]listedJSON, *redisstore.SandboxCursor, error) {
	out := []listedJSON{}
	if q.none {
		return out, nil, nil
	}
	var (
		gone  []string
		sizes = map[string]size{}
		last  []redisstore.SandboxCursor // the cursor of each sandbox in out
		cur   = q.after
	)
	defer func() {
		if len(gone) > 0 {
			s.forget(ctx, gone...)
		}
	}()
	for {
		batch, err := s.cfg.Records.SandboxScan(ctx, q.asc, cur, scanBatch)
		if err != nil {
			return nil, nil, err
		}
		for _, sb := range batch {
			cur = redisstore.SandboxCursor{Started: sb.Started, ID: sb.ID}
			if !q.since.IsZero() && sb.Started.Before(q.since) {
				if !q.asc {
					return out, nil, nil // older ones follow: none started after
				}
				continue
			}
			if !q.takes(sb) {
				continue
			}
			b, err := s.cfg.Sessions.Get(ctx, sb.Scope, sb.ID)
			if isGone(err) {
				gone = append(gone, sb.ID)
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			if len(out) == q.limit {
				return out, &last[len(last)-1], nil
			}
			out = append(out, s.listed(ctx, sb, b, sizes))
			last = append(last, cur)
		}
		if len(batch) < scanBatch {
			return out, nil, nil
		}
	}
}

// takes reports whether the query's template and metadata filters take the sandbox.
func (q listQuery) takes(sb redisstore.Sandbox) bool {
	if q.template != "" && sb.Scope != q.template {
		return false
	}
	for k, v := range q.metadata {
		if got, ok := sb.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// parseList reads a list's query; paged, the query of GET /v2/sandboxes, else of
// GET /sandboxes (metadata alone).
func parseList(v url.Values, paged bool) (listQuery, error) {
	q := listQuery{limit: maxPage}
	bad := func(field, format string, args ...any) (listQuery, error) {
		return listQuery{}, warmpool.Errorf(warmpool.CodeValidation, field+": "+format, args...)
	}
	if m := v.Get("metadata"); m != "" {
		pairs, err := url.ParseQuery(m)
		if err != nil {
			return bad("metadata", "not a query of key=value pairs: %v", err)
		}
		q.metadata = map[string]string{}
		for k, vs := range pairs {
			key, kerr := url.QueryUnescape(k)
			val, verr := url.QueryUnescape(vs[0])
			if kerr != nil || verr != nil {
				return bad("metadata", "%q is not URL-encoded", k+"="+vs[0])
			}
			q.metadata[key] = val
		}
	}
	if !paged {
		return q, nil
	}
	if st := v.Get("state"); st != "" {
		states := strings.Split(st, ",")
		for _, s := range states {
			if s != "running" && s != "paused" {
				return bad("state", "%q is no state (running, paused)", s)
			}
		}
		q.none = !slices.Contains(states, "running")
	}
	switch o := v.Get("order"); o {
	case "", "desc":
	case "asc":
		q.asc = true
	default:
		return bad("order", "%q, want asc or desc", o)
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxPage {
			return bad("limit", "%q, want 1 to %d", l, maxPage)
		}
		q.limit = n
	}
	if t := v.Get("startedAfter"); t != "" {
		since, err := time.Parse(time.RFC3339, t)
		if err != nil {
			return bad("startedAfter", "%q is not an RFC 3339 time", t)
		}
		q.since = since
	}
	q.template = v.Get("template")
	if tok := v.Get("nextToken"); tok != "" {
		c, ok := decodeToken(tok)
		if !ok {
			return bad("nextToken", "%q is no token of this list", tok)
		}
		q.after = c
	}
	return q, nil
}

// encodeToken and decodeToken make a cursor the opaque nextToken of E2B's paging:
// the start (ms) and id of the last sandbox of a page.
func encodeToken(c redisstore.SandboxCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.Started.UnixMilli(), 10) + "." + c.ID))
}

func decodeToken(tok string) (redisstore.SandboxCursor, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return redisstore.SandboxCursor{}, false
	}
	at, id, ok := strings.Cut(string(raw), ".")
	ms, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || !validSandboxID(id) {
		return redisstore.SandboxCursor{}, false
	}
	return redisstore.SandboxCursor{Started: time.UnixMilli(ms), ID: id}, true
}

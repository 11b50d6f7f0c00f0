package metrics

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
)

// contentType is the Prometheus text format's.
var contentType = string(expfmt.NewFormat(expfmt.TypeTextPlain))

// serving is the state of the scrapes: the slots that bound them and the rendering
// they share.
type serving struct {
	slots chan struct{}
	mu    sync.Mutex
	// last is the newest rendering, served while it is fresh (and let go after);
	// next is the one being made, which the scrapes that come meanwhile wait for.
	last *exposition
	next *rendering
	// size is the size of the last rendering, the buffer of the next one.
	size int
}

func (s *serving) init(slots int) { s.slots = make(chan struct{}, slots) }

// rendering is one rendering in progress; x is set when done is closed.
type rendering struct {
	done chan struct{}
	x    *exposition
}

// exposition is one rendering of every metric in the text format: immutable, shared
// by every scrape served from it, and let go when the last of them is written.
type exposition struct {
	at   time.Time
	text []byte
	// families are the byte ranges of each family in text, for name[] filters.
	families map[string][2]int
	gzOnce   sync.Once
	gz       []byte
}

// gzipWriters keep the compressors of the renderings (a megabyte of state each).
var gzipWriters = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed) // a valid level: no error
	return zw
}}

// gzipped is text compressed, made once, by the first scrape that asks for it.
func (x *exposition) gzipped() []byte {
	x.gzOnce.Do(func() {
		var b bytes.Buffer
		b.Grow(len(x.text) / 8)
		zw := gzipWriters.Get().(*gzip.Writer)
		zw.Reset(&b)
		_, _ = zw.Write(x.text) // a bytes.Buffer takes every write
		_ = zw.Close()
		gzipWriters.Put(zw)
		x.gz = b.Bytes()
	})
	return x.gz
}

// Handler serves the metrics in the Prometheus text format (gzipped when asked,
// `name[]` filters as promhttp reads them), with a bound on the cost of any scrape:
// at most Config.Scrapes at once, one more is answered 503 at once; each is written
// from a rendering shared for Config.Share by every scrape (made once, in one
// buffer, whatever the number of scrapers), with a write deadline at
// Config.ScrapeTimeout from its arrival, so a reader that does not read pins a slot
// and a shared buffer for that long at most.
func (m *Metrics) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := &m.serving
		select {
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
		default:
			unavailable(w, fmt.Sprintf("%d scrapes are being served; try again", cap(s.slots)))
			return
		}
		deadline := time.Now().Add(m.cfg.ScrapeTimeout)
		rc := http.NewResponseController(w)
		// A writer without deadlines (a test's recorder) is bounded by nothing here;
		// a server's always has them.
		_ = rc.SetWriteDeadline(deadline)
		ctx, cancel := context.WithDeadline(r.Context(), deadline)
		defer cancel()
		x, err := m.current(ctx)
		if err != nil {
			// The deadline has passed: a second more to say so.
			_ = rc.SetWriteDeadline(time.Now().Add(time.Second))
			unavailable(w, "the metrics were not gathered within the scrape timeout")
			return
		}
		body := x.text
		if names := r.URL.Query()["name[]"]; len(names) > 0 {
			body = x.filter(names)
		} else if acceptsGzip(r.Header.Get("Accept-Encoding")) {
			body = x.gzipped()
			w.Header().Set("Content-Encoding", "gzip")
		}
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Header().Add("Vary", "Accept-Encoding")
		if _, err := w.Write(body); err != nil {
			return // cut off at the deadline, or gone: the connection is closed
		}
		// Everything is with the kernel once flushed: the connection's next request
		// gets the server's own deadline.
		if rc.Flush() == nil {
			_ = rc.SetWriteDeadline(time.Time{})
		}
	})
}

// unavailable answers 503 with a Retry-After of a second.
func unavailable(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, msg, http.StatusServiceUnavailable)
}

// acceptsGzip reports whether an Accept-Encoding header accepts gzip.
func acceptsGzip(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		if strings.TrimSpace(coding) != "gzip" {
			continue
		}
		q, ok := strings.CutPrefix(strings.TrimSpace(params), "q=")
		if !ok {
			return true
		}
		v, err := strconv.ParseFloat(q, 64)
		return err == nil && v > 0
	}
	return false
}

// filter is the text of the families named.
func (x *exposition) filter(names []string) []byte {
	var out []byte
	for _, n := range names {
		if r, ok := x.families[n]; ok {
			out = append(out, x.text[r[0]:r[1]]...)
		}
	}
	return out
}

// current returns a fresh rendering: the last one while it is fresh, else the one
// being made (started by the first scrape that found none fresh). A rendering runs
// on its own, so a scrape that gives up does not stop it for the others.
func (m *Metrics) current(ctx context.Context) (*exposition, error) {
	s := &m.serving
	s.mu.Lock()
	if x := s.last; x != nil && time.Since(x.at) < m.cfg.Share {
		s.mu.Unlock()
		return x, nil
	}
	r := s.next
	if r == nil {
		r = &rendering{done: make(chan struct{})}
		s.next = r
		go m.renderInto(r)
	}
	s.mu.Unlock()
	select {
	case <-r.done:
		return r.x, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (m *Metrics) renderInto(r *rendering) {
	s := &m.serving
	s.mu.Lock()
	size := s.size
	s.mu.Unlock()
	x := m.render(size)
	s.mu.Lock()
	s.last, s.next, s.size = x, nil, len(x.text)
	s.mu.Unlock()
	r.x = x
	close(r.done)
	// Once it is no longer fresh nothing is served from it: its text (hundreds of
	// bytes a scope) goes with the scrapes still writing it, not at the next one.
	time.AfterFunc(m.cfg.Share, func() {
		s.mu.Lock()
		if s.last == x {
			s.last = nil
		}
		s.mu.Unlock()
	})
}

// render gathers every metric and writes it in the text format, in the order of the
// families' names, into one buffer of about the last rendering's size.
func (m *Metrics) render(size int) *exposition {
	scoped, fams, err := m.gather()
	if err != nil {
		// A collector's inconsistent series: the families gathered are still
		// served, as promhttp's ContinueOnError does.
		m.log.Error("metrics gathered with errors", "err", err)
	}
	var b bytes.Buffer
	b.Grow(size + size/8)
	x := &exposition{families: make(map[string][2]int, len(fams)+len(scoped))}
	for len(fams) > 0 || len(scoped) > 0 {
		start := b.Len()
		var name string
		if len(scoped) > 0 && (len(fams) == 0 || scoped[0].name < fams[0].GetName()) {
			name = scoped[0].name
			scoped[0].text(&b)
			scoped = scoped[1:]
		} else {
			f := fams[0]
			fams = fams[1:]
			name = f.GetName()
			if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
				m.log.Error("metric family not written", "family", name, "err", err)
				b.Truncate(start)
				continue
			}
		}
		x.families[name] = [2]int{start, b.Len()}
	}
	x.text, x.at = b.Bytes(), time.Now()
	return x
}

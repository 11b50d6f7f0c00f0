package metrics_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/metrics"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// served is a Metrics with two scopes behind an httptest server, and the number of
// times the pool gauges were read from Redis (the scopes listed).
type served struct {
	url   string
	reads *atomic.Int64
}

func serve(t *testing.T, cfg metrics.Config) served {
	t.Helper()
	r := testredis.New(t)
	var reads atomic.Int64
	r.Client.AddHook(testredis.EachCommand(func(cmd redis.Cmder) {
		if cmd.Name() == "smembers" {
			reads.Add(1)
		}
	}))
	store := redisstore.NewStore(r.Client, r.Prefix)
	publish(t, store, "a")
	publish(t, store, "b")
	m := newMetrics(t, store, cfg)
	m.ObserveRoute("a", warmpool.SourceWarm, "", time.Millisecond)
	ts := httptest.NewServer(m.Handler())
	t.Cleanup(ts.Close)
	return served{url: ts.URL, reads: &reads}
}

func scrape(t *testing.T, url string, hdrs ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdrs); i += 2 {
		req.Header.Set(hdrs[i], hdrs[i+1])
	}
	res, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// Scrapes that come together are written from one rendering: one read of the pool
// gauges for all of them; a scrape after Share renders again.
func TestScrapesShareARendering(t *testing.T) {
	t.Parallel()
	const n = 8
	s := serve(t, metrics.Config{Scrapes: n, Share: time.Hour})
	var wg sync.WaitGroup
	bodies := make([][]byte, n)
	for i := range n {
		wg.Go(func() { _, bodies[i] = scrape(t, s.url) })
	}
	wg.Wait()
	if got := s.reads.Load(); got != 1 {
		t.Errorf("%d concurrent scrapes read the pool gauges %d times, want once", n, got)
	}
	for i := range bodies {
		if !bytes.Equal(bodies[i], bodies[0]) || !bytes.Contains(bodies[i], []byte(`warmpool_max_pods{scope="b"}`)) {
			t.Fatalf("scrape %d differs from the first or lacks the gauges:\n%s", i, bodies[i])
		}
	}

	fresh := serve(t, metrics.Config{Share: 50 * time.Millisecond})
	scrape(t, fresh.url)
	await.True(t, 5*time.Second, "a scrape after the rendering's share renders again", func() bool {
		scrape(t, fresh.url)
		return fresh.reads.Load() >= 2
	})
}

// A rendering is let go once it is no longer fresh: its text, hundreds of bytes a
// scope, is not kept until the next scrape.
func TestRenderingLetGoAfterShare(t *testing.T) {
	t.Parallel()
	r := testredis.New(t)
	store := redisstore.NewStore(r.Client, r.Prefix)
	publish(t, store, "a")
	m := newMetrics(t, store, metrics.Config{Share: 20 * time.Millisecond})
	ts := httptest.NewServer(m.Handler())
	t.Cleanup(ts.Close)
	if _, body := scrape(t, ts.URL); !bytes.Contains(body, []byte(`warmpool_max_pods{scope="a"}`)) {
		t.Fatalf("the scrape lacks the gauges:\n%s", body)
	}
	await.True(t, 5*time.Second, "the rendering let go after its share", func() bool { return !metrics.Holds(m) })
}

// The text is served gzipped to a scraper that accepts it (Prometheus does), as is
// to one that does not, and cut to the families of name[] parameters.
func TestScrapeEncodings(t *testing.T) {
	t.Parallel()
	s := serve(t, metrics.Config{Share: time.Hour})
	res, text := scrape(t, s.url)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Encoding") != "" || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("plain scrape: %d %v", res.StatusCode, res.Header)
	}
	for _, ae := range []string{"gzip", "deflate, gzip;q=0.5", "br;q=1.0, gzip"} {
		res, gz := scrape(t, s.url, "Accept-Encoding", ae)
		if res.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("Accept-Encoding %q: Content-Encoding %q, want gzip", ae, res.Header.Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(zr); err != nil || !bytes.Equal(b, text) {
			t.Fatalf("Accept-Encoding %q: the gzipped text (%v) is not the plain one", ae, err)
		}
	}
	if res, _ := scrape(t, s.url, "Accept-Encoding", "gzip;q=0, identity"); res.Header.Get("Content-Encoding") != "" {
		t.Errorf("gzip;q=0: Content-Encoding %q, want none", res.Header.Get("Content-Encoding"))
	}
	_, some := scrape(t, s.url+"?name[]=warmpool_routes_total&name[]=warmpool_max_pods&name[]=nothing")
	want := `# HELP warmpool_routes_total`
	if !strings.HasPrefix(string(some), want) || !strings.Contains(string(some), `warmpool_max_pods{scope="b"} 4`) ||
		strings.Contains(string(some), "warmpool_sessions") || strings.Contains(string(some), "go_") {
		t.Errorf("name[] of two families:\n%s", some)
	}
}

// The text a scrape gets is the gathering (Gather) in the text format: the families
// labelled by scope, which the rendering writes itself, as expfmt writes the messages
// Gather gives, labels escaped, scopes with a detail and without, an empty scope.
func TestTextIsTheGathering(t *testing.T) {
	t.Parallel()
	r := testredis.New(t)
	store := redisstore.NewStore(r.Client, r.Prefix)
	for _, scope := range []string{"a", "b", "team-c"} {
		publish(t, store, scope)
	}
	m := newMetrics(t, store, metrics.Config{ScopeDetail: "team-*", Share: time.Hour})
	for _, scope := range []string{"a", "team-c"} {
		m.ObserveRoute(scope, warmpool.SourceDeployed, "", time.Second)
		m.ObserveRoute(scope, warmpool.SourceAffinity, "", time.Millisecond)
		m.ObserveDeploy(scope, "fake", "ok", time.Second)
	}
	m.ObserveRoute("b", "", warmpool.CodeNoPodAvailable, time.Millisecond)
	m.ObserveRoute(`bad"name\`, "", warmpool.CodeValidation, time.Millisecond)
	m.ObserveRoute("a", "", "WEIRD\"\\\nCODE", time.Millisecond)
	ts := httptest.NewServer(m.Handler())
	defer ts.Close()
	_, text := scrape(t, ts.URL)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("the text does not parse: %v\n%s", err, text)
	}
	gathered, err := m.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Go's and the process's own metrics move between the two.
	own := func(name string) bool { return strings.HasPrefix(name, "warmpool_") }
	var want, got bytes.Buffer
	n := 0
	for _, f := range gathered {
		if !own(f.GetName()) {
			continue
		}
		n++
		if _, err := expfmt.MetricFamilyToText(&want, f); err != nil {
			t.Fatal(err)
		}
		p, ok := parsed[f.GetName()]
		if !ok {
			t.Errorf("%s gathered, not in the text", f.GetName())
			continue
		}
		if _, err := expfmt.MetricFamilyToText(&got, p); err != nil {
			t.Fatal(err)
		}
	}
	if n < 10 || got.String() != want.String() {
		t.Errorf("the text of %d families, encoded again:\n%s\nwant the gathering's:\n%s", n, got.String(), want.String())
	}
}

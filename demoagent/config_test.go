package demoagent

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool/agent"
)

// A stream that names its session gets a config event after hello: the names of the
// session's env, never their values; a session the pod does not have gets the error.
func TestStreamTellsItsSessionConfig(t *testing.T) {
	a := New("p1")
	a.Heartbeat = time.Hour
	a.SessionConfig = func(_ context.Context, s string) (map[string]string, error) {
		if s != "s1" {
			return nil, agent.ErrNoSession
		}
		return map[string]string{"TOKEN": "secret-value", "MODE": "fast"}, nil
	}
	ts := httptest.NewServer(a)
	defer ts.Close()
	for sid, want := range map[string]string{"s1": `{"env":["MODE","TOKEN"],"session_id":"s1"}`, "s2": `SESSION_NOT_FOUND`} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+DefaultSSEPath+"?session_id="+sid, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(res.Body)
		var data string
		for sc.Scan() {
			if sc.Text() == "event: config" && sc.Scan() {
				data = sc.Text()
				break
			}
		}
		cancel()
		res.Body.Close()
		if !strings.Contains(data, want) || strings.Contains(data, "secret-value") {
			t.Errorf("config event of %s: %q, want %s and no value", sid, data, want)
		}
	}
}

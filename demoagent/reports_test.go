package demoagent_test

import (
	"bufio"
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/warmpool/warmpool/demoagent"
	"github.com/warmpool/warmpool/internal/testing/await"
)

// The demo agent's sessions are its open SSE streams that name a session: a stream of
// ?session_id=S makes S one of them while it is open; a stream without one is none.
// The session_ticket a stream brings (&session_ticket=T, as the gateway passes it from
// the route answer) is the session's while it has a stream, for the reports to send.
func TestSessionsAreTheOpenNamedStreams(t *testing.T) {
	a := demoagent.New("p1")
	ts := httptest.NewServer(a)
	t.Cleanup(ts.Close)
	open := func(query string) context.CancelFunc {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/sse"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil { // the hello event
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = res.Body.Close() })
		return cancel
	}
	closeS1 := open("?session_id=s1&session_ticket=T1")
	open("?session_id=s2")
	open("")
	if got := a.Sessions(); !slices.Equal(got, []string{"s1", "s2"}) {
		t.Fatalf("sessions %v, want s1 and s2", got)
	}
	if got := a.Tickets(); !maps.Equal(got, map[string]string{"s1": "T1"}) {
		t.Fatalf("tickets %v, want s1's T1", got)
	}
	closeS1()
	await.True(t, 5*time.Second, "s1's stream to close", func() bool { return slices.Equal(a.Sessions(), []string{"s2"}) })
	if got := a.Tickets(); len(got) != 0 {
		t.Fatalf("tickets %v after s1's stream closed, want none", got)
	}
}

package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
)

// The adapter writes whatever a Handler returns as the envelope with the code's
// status, sets Retry-After with retry_after, and logs INTERNAL errors only.
func TestAdapter(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		code       string
		retryAfter string
		logged     bool
	}{
		{"validation", warmpool.Errorf(warmpool.CodeValidation, "session_id: required"), 400, "VALIDATION", "", false},
		{"wrapped retry", fmt.Errorf("acquire: %w", warmpool.Errorf(warmpool.CodeNoPodAvailable, "full").Retry(3)), 503, "NO_POD_AVAILABLE", "3", false},
		{"deadline", fmt.Errorf("redis: %w", context.DeadlineExceeded), 503, "STORE_UNAVAILABLE", "1", false},
		{"plain error", errors.New("boom"), 500, "INTERNAL", "", true},
		{"internal code", warmpool.Errorf(warmpool.CodeInternal, "stored config is not readable"), 500, "INTERNAL", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := Adapter(slog.New(slog.NewTextHandler(&logs, nil)))(func(http.ResponseWriter, *http.Request) error { return tc.err })
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/x", nil))
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d", w.Code, tc.status)
			}
			var env struct {
				Error struct {
					Code       string `json:"code"`
					Message    string `json:"message"`
					RetryAfter int    `json:"retry_after"`
				} `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil || env.Error.Code != tc.code || env.Error.Message == "" {
				t.Fatalf("body %s (%v), want the envelope with code %s", w.Body, err, tc.code)
			}
			if got := w.Header().Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tc.retryAfter)
			}
			if logged := strings.Contains(logs.String(), "level=ERROR"); logged != tc.logged {
				t.Errorf("logged as error: %v, want %v (log %q)", logged, tc.logged, logs.String())
			}
		})
	}
}

// A Handler that answers writes the answer; the adapter adds nothing.
func TestAdapterPassesAnswers(t *testing.T) {
	h := Adapter(slog.New(slog.DiscardHandler))(func(w http.ResponseWriter, _ *http.Request) error {
		return OK(w, map[string]bool{"touched": true})
	})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/x", nil))
	if w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"touched":true}` {
		t.Fatalf("answer %d %s, want 200 {\"touched\":true}", w.Code, w.Body)
	}
}

// A caller that went away gets nothing written and nothing logged.
func TestAdapterClientGone(t *testing.T) {
	var logs bytes.Buffer
	h := Adapter(slog.New(slog.NewTextHandler(&logs, nil)))(func(_ http.ResponseWriter, r *http.Request) error { return r.Context().Err() })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/x", nil).WithContext(ctx))
	if w.Body.Len() != 0 || logs.Len() != 0 {
		t.Fatalf("client gone: wrote %q, logged %q", w.Body, logs.String())
	}
}

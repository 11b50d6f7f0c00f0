package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// client calls one warmpool replica and records every call.
type client struct {
	base  string
	token string
	http  *http.Client
}

// newClient builds an HTTP client whose every connection must go to a loopback
// address (checked on the resolved address, so a name that resolves elsewhere is
// refused too) and which follows no redirect.
func newClient(base, token string, conns int, timeout time.Duration) *client {
	dialer := &net.Dialer{
		Timeout: 5 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return fmt.Errorf("refused to connect to %s: not a loopback address", address)
			}
			return nil
		},
	}
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &client{
		base:  strings.TrimRight(base, "/"),
		token: token,
		http: &http.Client{
			Transport: tr,
			Timeout:   timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return errors.New("redirects are not followed")
			},
		},
	}
}

func (c *client) close() { c.http.CloseIdleConnections() }

// answer is one HTTP answer; status 0 means the call failed before an answer
// (err says why).
type answer struct {
	status int
	code   string // the error envelope's code, for non-2xx answers
	body   []byte
	err    error
}

// ok reports a 2xx answer.
func (a answer) ok() bool { return a.status >= 200 && a.status < 300 }

// outcome names the answer for counting: "200", "503 QUEUE_FULL", "error: …".
func (a answer) outcome() string {
	switch {
	case a.status == 0:
		return "error"
	case a.code != "":
		return fmt.Sprintf("%d %s", a.status, a.code)
	}
	return fmt.Sprint(a.status)
}

// errorText is what a failed call is known by ("" for a 2xx answer).
func (a answer) errorText() string {
	switch {
	case a.err != nil:
		return a.err.Error()
	case a.ok():
		return ""
	case a.code != "":
		return a.code
	}
	return http.StatusText(a.status)
}

// do sends one request; body is JSON-encoded unless nil.
func (c *client) do(ctx context.Context, method, path string, body any) answer {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return answer{err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return answer{err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return answer{err: err}
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	a := answer{status: resp.StatusCode, body: raw}
	if err != nil {
		a.err = err
	}
	if !a.ok() {
		var env struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &env) == nil {
			a.code = env.Error.Code
		}
	}
	return a
}

// decode decodes a 2xx answer's body into v, else returns the answer as an error.
func (a answer) decode(v any) error {
	if !a.ok() {
		return a.asError()
	}
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("bad answer %q: %w", truncate(a.body, 200), err)
	}
	return nil
}

// asError describes a failed answer.
func (a answer) asError() error {
	if a.status == 0 {
		return a.err
	}
	return fmt.Errorf("%d: %s", a.status, truncate(bytes.TrimSpace(a.body), 300))
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// retryPolicy decides whether and when a call is sent again.
type retryPolicy struct {
	attempts  int
	budget    time.Duration
	base, max time.Duration
	// jitter returns a random number in [0, n); rand.Int64N, replaced in tests.
	jitter func(n int64) int64
}

func (p retryPolicy) check() error {
	switch {
	case p.attempts < 1:
		return fmt.Errorf("max attempts %d: want at least 1", p.attempts)
	case p.budget < 0:
		return fmt.Errorf("retry budget %v: want 0 (none) or more", p.budget)
	case p.base <= 0 || p.max < p.base:
		return fmt.Errorf("backoff base %v, max %v: want 0 < base <= max", p.base, p.max)
	}
	return nil
}

// wait is the wait before the attempt after attempt n (n >= 1) failed with a
// Retry-After of retryAfter (0: none): the larger of it and base·2^(n-1) capped at
// max, plus a random share of up to a quarter of that.
func (p retryPolicy) wait(n int, retryAfter time.Duration) time.Duration {
	backoff := p.max
	if n-1 < 62 && p.base <= p.max>>(n-1) {
		backoff = p.base << (n - 1)
	}
	d := max(backoff, retryAfter)
	return d + time.Duration(p.jitter(int64(d/4)+1))
}

// maxResponse bounds the body of an answer read.
const maxResponse = 1 << 20

// call is one logical call: sent once, and again as the policy allows.
type call struct {
	method, path string
	body         any // nil: no body
	idemKey      string
}

// newIdemKey is a fresh Idempotency-Key: 26 characters of base32, in the server's
// request id alphabet.
func newIdemKey() string { return rand.Text() }

// do sends the call until it succeeds or the policy gives up, and decodes the answer
// into out.
func (c *Client) do(ctx context.Context, cl call, out any) error {
	var body []byte
	if cl.body != nil {
		b, err := json.Marshal(cl.body)
		if err != nil {
			return fmt.Errorf("warmpool %s %s: encode the body: %w", cl.method, cl.path, err)
		}
		body = b
	}
	start := time.Now()
	for attempt := 1; ; attempt++ {
		again, err := c.once(ctx, cl, body, out)
		if err == nil || !again || attempt >= c.retry.attempts {
			return err
		}
		var ra time.Duration
		if e, ok := errors.AsType[*Error](err); ok {
			ra = e.RetryAfter
		}
		wait := c.retry.wait(attempt, ra)
		now := time.Now()
		if deadline, ok := ctx.Deadline(); ok && now.Add(wait).After(deadline) {
			return err
		}
		if c.retry.budget > 0 && now.Add(wait).Sub(start) > c.retry.budget {
			return err
		}
		if c.log != nil {
			c.log.InfoContext(ctx, "warmpool call retried", "method", cl.method, "path", cl.path,
				"attempt", attempt+1, "wait", wait, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w; gave up waiting to retry: %w", err, ctx.Err())
		}
	}
}

// once sends the call one time. again says whether a failure may be retried: an
// answer of a retryable code, or a transport error before any answer while ctx lives.
func (c *Client) once(ctx context.Context, cl call, body []byte, out any) (again bool, err error) {
	req, err := http.NewRequestWithContext(ctx, cl.method, c.base+cl.path, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("warmpool %s %s: %w", cl.method, cl.path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if cl.idemKey != "" {
		req.Header.Set("Idempotency-Key", cl.idemKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return ctx.Err() == nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return false, fmt.Errorf("warmpool %s %s: %d answer: read: %w", cl.method, cl.path, resp.StatusCode, err)
	}
	if len(raw) > maxResponse {
		return false, fmt.Errorf("warmpool %s %s: %d answer over %d bytes", cl.method, cl.path, resp.StatusCode, maxResponse)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := errorOf(resp, raw)
		return retryable[e.Code], e
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return false, fmt.Errorf("warmpool %s %s: answer: %w", cl.method, cl.path, err)
	}
	return false, nil
}

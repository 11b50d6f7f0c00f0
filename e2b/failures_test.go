package e2b_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/e2b"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/redisstore"
)

// failingRecords is the store, but its SandboxAdd fails as a lost Redis does.
type failingRecords struct{ *redisstore.Store }

func (failingRecords) SandboxAdd(context.Context, redisstore.Sandbox, time.Time) error {
	return warmpool.Errorf(warmpool.CodeStoreUnavailable, "redis unavailable").Retry(1)
}

// own serves a front door of the door's replica built with cfg's changes.
func (d *door) own(change func(*e2b.Config)) string {
	cfg := e2b.Config{Sessions: d.srv.SM, Records: d.srv.Store(), Scopes: d.srv.Store(), Clock: d.clock}
	change(&cfg)
	ts := httptest.NewServer(e2b.New(cfg).Handler(httpx.Bounds(time.Minute, time.Minute)))
	d.t.Cleanup(ts.Close)
	return ts.URL
}

// A create whose record cannot be written ends the session it bound and answers the
// store's 503 with Retry-After: nothing is left behind.
func TestCreateCleansUpAFailedRecord(t *testing.T) {
	d := newDoor(t)
	base := d.own(func(c *e2b.Config) {
		c.Records = failingRecords{d.srv.Store()}
		c.NewID = func() string { return "lost0" }
	})
	a := send(t, base, http.MethodPost, "/v2/sandboxes", `{"templateID":"tpl"}`, "")
	refused(t, "create without a record", a, http.StatusServiceUnavailable, "redis")
	if a.header.Get("Retry-After") != "1" {
		t.Fatalf("503 without Retry-After: %v", a.header)
	}
	d.sessionGone("lost0")
}

// A drawn id that names a session bound already leaves that session alone: the
// create draws another.
func TestCreateDrawsAnotherID(t *testing.T) {
	d := newDoor(t)
	ids := []string{"first0", "first0", "second0"}
	base := d.own(func(c *e2b.Config) {
		c.NewID = func() string { id := ids[0]; ids = ids[1:]; return id }
	})
	var one, two sandbox
	send(t, base, http.MethodPost, "/v2/sandboxes", `{"templateID":"tpl","timeout":30}`, "").into(t, &one)
	end := d.info("first0").EndAt
	d.clock.Advance(time.Second)
	send(t, base, http.MethodPost, "/v2/sandboxes", `{"templateID":"tpl","timeout":60}`, "").into(t, &two)
	if one.SandboxID != "first0" || two.SandboxID != "second0" {
		t.Fatalf("created %s and %s, want first0 and second0", one.SandboxID, two.SandboxID)
	}
	if got := d.info("first0").EndAt; !got.Equal(end) {
		t.Fatalf("first0 ends %v after the clash, want %v", got, end)
	}
}

// A scope with no room answers E2B's 503 with Retry-After (the SDK's "busy, retry"),
// and the refused create leaves no record.
func TestCreateWithoutRoom(t *testing.T) {
	d := newDoor(t)
	d.putScope("small", `{"pool":{"max_concurrency":1,"pod_concurrency":1,"queue_size":0}}`)
	d.create(`{"templateID":"small"}`)
	a := d.call(http.MethodPost, "/v2/sandboxes", `{"templateID":"small"}`, gatewayKey)
	refused(t, "create in a full scope", a, http.StatusServiceUnavailable, "small")
	if a.header.Get("Retry-After") == "" {
		t.Fatalf("503 without Retry-After: %v", a.header)
	}
	var listed []detail
	if d.call(http.MethodGet, "/v2/sandboxes?template=small", "", gatewayKey).into(t, &listed); len(listed) != 1 {
		t.Fatalf("listed %d sandboxes of small, want the one created", len(listed))
	}
}

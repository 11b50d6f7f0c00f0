package k8s

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/internal/testing/syncbuf"
)

// TestDeployLogsCarryRequestID: the driver logs the lines of a deploy with the deploy's
// context, so the id of the request that caused it is on them.
func TestDeployLogsCarryRequestID(t *testing.T) {
	var out syncbuf.Buffer
	log := slog.New(httpx.LogHandler(slog.NewJSONHandler(&out, nil)))
	k := mustKube(t, readyClient(t, "127.1.0.6"), func(c *Config) { c.Logger = log })
	ctx := httpx.WithRequestID(context.Background(), "req-77")
	if _, err := k.Deploy(ctx, kubeReq("s1", 1)); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == "pod ready" {
			if m["request_id"] != "req-77" {
				t.Fatalf("pod ready line %v: want request_id req-77", m)
			}
			return
		}
	}
	t.Fatalf("no pod ready line in:\n%s", out.String())
}

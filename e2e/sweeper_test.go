package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/warmpool/warmpool/internal/testing/await"
)

// TestSweepersKeepThePoolWarm runs the binary (--dev: the embedded Redis) with the
// local driver and a 1s sweep: a scope with min_idle_pods 2 gets two idle pods; a
// change of a deploy field drains the old idle pods and warms two new ones; a pod whose
// process is killed is buried and replaced.
func TestSweepersKeepThePoolWarm(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "pods")
	_, base, _ := runServe(t, "--dev", "--store", filepath.Join(dir, "w.db"),
		"--driver", "local", "--local-state-dir", state, "--sweep-interval", "1s")

	idle := func(ver string) map[string]bool {
		var pool struct {
			DeployVer string `json:"deploy_ver"`
			Pods      []struct {
				PodID     string `json:"pod_id"`
				State     string `json:"state"`
				DeployVer string `json:"deploy_ver"`
			} `json:"pods"`
		}
		call(t, http.MethodGet, base+"/v1/scopes/warm/pool", "", &pool)
		out := map[string]bool{}
		for _, pod := range pool.Pods {
			if pod.State == "idle" && pod.DeployVer == ver {
				out[pod.PodID] = true
			}
		}
		if len(out) != len(pool.Pods) {
			return nil // something else is still there (draining, deploying)
		}
		return out
	}
	put := func(doc string) string {
		var r struct {
			DeployVer string `json:"deploy_ver"`
		}
		if st := call(t, http.MethodPut, base+"/v1/scopes/warm/config", doc, &r); st != http.StatusOK {
			t.Fatalf("put config: %d", st)
		}
		return r.DeployVer
	}

	v1 := put(`{"pool":{"min_idle_pods":2,"max_concurrency":8,"pod_concurrency":2}}`)
	var first map[string]bool
	await.True(t, 20*time.Second, "two idle pods of the first version", func() bool {
		first = idle(v1)
		return len(first) == 2
	})

	v2 := put(`{"deploy":{"env":{"RELEASE":"2"}},"pool":{"min_idle_pods":2,"max_concurrency":8,"pod_concurrency":2}}`)
	if v2 == v1 {
		t.Fatal("changing deploy.env did not change deploy_ver")
	}
	var second map[string]bool
	await.True(t, 20*time.Second, "old idle pods gone, two idle pods of the new version", func() bool {
		second = idle(v2)
		return len(second) == 2
	})
	for id := range second {
		if first[id] {
			t.Fatalf("pod %s of the old version is still there", id)
		}
	}

	var victim string
	for id := range second {
		victim = id
		break
	}
	raw, err := os.ReadFile(filepath.Join(state, victim+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil || rec.PID == 0 {
		t.Fatalf("state file of %s: %v %s", victim, err, raw)
	}
	if err := syscall.Kill(rec.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	await.True(t, 20*time.Second, "the killed pod buried and replaced", func() bool {
		now := idle(v2)
		return len(now) == 2 && !now[victim]
	})
}

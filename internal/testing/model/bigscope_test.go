package model_test

import (
	"flag"
	"testing"

	"github.com/warmpool/warmpool"
)

var (
	bigSteps  = flag.Int("model.bigsteps", 1000, "steps of each run of TestBigScopeFollowsTheModel")
	bigLeast  = flag.Int("model.bigpods", 200, "the pods the scope of TestBigScopeFollowsTheModel must reach")
	bigScopes = scopes{configs: map[string][2]warmpool.PoolConfig{
		// Room for 260 pods of two sessions, deployed up to 16 at a time, a warm pool of
		// four; the changed capacity lowers it to 150 pods of one session, so that a
		// hundred pods and more are surplus at once, and limits the sessions a pod
		// serves.
		"c": {
			{MaxConcurrency: 520, PodConcurrency: 2, MinIdlePods: 4, PodTTLS: 7200, SessionTTLS: 7200, QueueSize: 8, WaitTimeoutS: 10, HoldTTLS: 120, MaxParallelDeploys: 16},
			{MaxConcurrency: 150, PodConcurrency: 1, MinIdlePods: 2, PodTTLS: 7200, SessionTTLS: 7200, QueueSize: 8, WaitTimeoutS: 10, HoldTTLS: 120, MaxParallelDeploys: 16, MaxSessionsPerPod: 40},
		},
	}, sessions: 600, waiters: 12, fill: 220}
)

// bigWeights fill the scope: acquires that lead deploys and registers that commit them
// come most often, the steps that free slots and take pods apart less; changes of
// capacity and rollouts now and then, so that hundreds of pods meet a lower max_pods
// and a new version.
var bigWeights = map[string]int{
	"pod_acquire": 20, "pod_register": 24, "pod_placeholder": 6, "session_route": 60,
	"session_end": 2, "session_touch": 2, "session_evict": 2, "claim_release": 4, "hold_release": 2, "hold_touch": 2,
	"follower_wait": 6, "follower_leave": 2, "waiter_leave": 2, "deploy_abort": 2, "deploy_extend": 2,
	"pod_purge": 2, "pod_adopt": 2, "scope_repair": 2, "agent_report": 2, "session_deadline": 2,
	"scope_capacity": 1, "scope_rollout": 1, "scope_publish": 1, "drift": 1,
}

// TestBigScopeFollowsTheModel is TestScriptsFollowTheModel on one scope of hundreds of
// pods (make test: one run of -model.bigsteps steps; the figure of docs/scaling.md
// comes from -rapid.checks=20 -model.bigsteps=5000): the indexes that keep the scripts'
// choices O(log P) are checked against what they index after every step, the scripts'
// answers and state against the model's, with a hundred pods and more beyond a lowered
// max_pods and pods of two versions at once. The scope is filled with 220 pods
// first, and must hold -model.bigpods pods or more after some step.
func TestBigScopeFollowsTheModel(t *testing.T) {
	if testing.Short() {
		t.Skip("hundreds of pods a step: not in -short")
	}
	if !flagSet("rapid.checks") {
		if err := flag.Set("rapid.checks", "1"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set("rapid.checks", "100") })
	}
	most := runModel(t, bigWeights, bigScopes, *bigSteps)
	if most < *bigLeast {
		t.Fatalf("the scope held at most %d pods, want %d or more", most, *bigLeast)
	}
	t.Logf("the scope held up to %d pods", most)
}

// flagSet reports whether the command line set the flag.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

package sm_test

import (
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/sm"
)

// Issue 12.4: 20 concurrent cold routes of one session, spread over two replicas,
// deploy one pod and all answer it; none is turned away. Before, each route took a
// pod of its own: max_pods deploys (4 of 4) and 8 of the 20 got QUEUE_FULL for a
// session that was bound. With distinct request ids the routes are distinct calls,
// and still one session: the same holds.
func TestConcurrentColdRoutesOfOneSessionDeployOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		requestID func(i int) string
	}{
		{"no request id", func(int) string { return "" }},
		{"a request id each", func(i int) string { return "req-" + string(rune('a'+i)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := replicatest.New(t)
			a, b := replica(h, replicatest.Config{}), replica(h, replicatest.Config{})
			// max_pods 4, a queue of 4: what the issue measured with.
			h.Scope("s", 8, 2, func(c *warmpool.ScopeConfig) { c.Pool.QueueSize, c.Pool.WaitTimeoutS = 4, 5 })
			release := h.Fake.Hold()
			const n = 20
			chs := make([]<-chan routed, n)
			for i := range n {
				chs[i] = routeAsync([]*sm.Manager{a, b}[i%2], "s", "sticky", tc.requestID(i))
			}
			h.WaitInFlight(1)
			// A second deploy can only be watched for: 300ms is ages for 19 script
			// calls and a deploy start on loopback.
			if err := h.Fake.WaitInFlight(ctxTimeout(t, 300*time.Millisecond), 2); err == nil {
				t.Errorf("a second deploy started for the same session (%d in flight)", h.Fake.InFlight())
			}
			release()
			pods, news, failed := map[string]int{}, 0, 0
			for _, ch := range chs {
				r := replicatest.Recv(t, "the route", ch)
				if r.err != nil {
					failed++
					t.Logf("route: %v", r.err)
					continue
				}
				pods[r.b.PodID]++
				if r.b.New {
					news++
				}
			}
			t.Logf("%d deploys, %d of %d routes failed, answers %v", h.Fake.DeployCount(), failed, n, pods)
			if failed > 0 || len(pods) != 1 || news != 1 {
				t.Fatalf("%d failed, routes went to %v with %d new:true; want every route on one pod, one new", failed, pods, news)
			}
			if d := h.Fake.DeployCount(); d != 1 {
				t.Fatalf("%d deploys for one session, want 1", d)
			}
			s := h.Settled("s")
			for pod := range pods {
				if len(s.Sessions) != 1 || s.Sessions["sticky"] != pod || len(s.Pods) != 1 || s.Pods[0].Slots != 1 {
					t.Fatalf("sessions %v pods %+v; want sticky alone on %s", s.Sessions, s.Pods, pod)
				}
			}
		})
	}
}

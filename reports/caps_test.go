package reports

import (
	"context"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

// capStore is a State that counts the ReportCap reads and answers reports with most
// (or err).
type capStore struct {
	reads int
	cap   int
	most  int
	err   error
}

func (c *capStore) ReportCap(context.Context, string, string) (int, error) {
	c.reads++
	return c.cap, nil
}

func (c *capStore) AgentReport(context.Context, redisstore.AgentReport) (redisstore.AgentAnswer, error) {
	return redisstore.AgentAnswer{Interval: time.Second, Most: c.most}, c.err
}

// A pod's cap comes from Redis until one of its reports is answered here; from then
// its reports' answers bound the next ones without a read (the round trip each report
// paid before), until a fresh read is asked for, the pod is answered unknown, or it
// reports no more for two capAge.
func TestCapIsTheLastReportsAnswer(t *testing.T) {
	ctx := context.Background()
	st := &capStore{cap: 2, most: 4}
	clock := testredis.NewClock()
	m := New(st, Config{Clock: clock})
	cap := func(fresh bool, want int, cached bool, reads int) {
		t.Helper()
		n, c, err := m.Cap(ctx, "s", "p", fresh)
		if err != nil || n != want || c != cached || st.reads != reads {
			t.Fatalf("Cap(fresh %v) = %d, cached %v, %v after %d reads; want %d, cached %v after %d", fresh, n, c, err, st.reads, want, cached, reads)
		}
	}
	report := func() error {
		_, err := m.Report(ctx, warmpool.AgentReport{ScopeID: "s", PodID: "p", State: warmpool.AgentReady})
		return err
	}
	cap(false, 2, false, 1)
	if err := report(); err != nil {
		t.Fatal(err)
	}
	cap(false, 4, true, 1)
	cap(false, 4, true, 1)
	cap(true, 2, false, 2)
	cap(false, 2, false, 3) // a fresh read dropped what was cached
	if err := report(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(capAge)
	cap(false, 4, true, 3) // the previous generation, moved up
	clock.Advance(capAge)
	cap(false, 4, true, 3)
	clock.Advance(2 * capAge)
	cap(false, 2, false, 4) // two ages unused: dropped
	if err := report(); err != nil {
		t.Fatal(err)
	}
	st.err = redisstore.ErrPodUnknown
	if err := report(); warmpool.ErrorCode(err) != warmpool.CodePodNotFound {
		t.Fatalf("report of an unknown pod: %v", err)
	}
	cap(false, 2, false, 5)
}

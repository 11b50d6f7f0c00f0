package redisstore

import (
	"context"
	"testing"
	"time"
)

// The deploy log keeps the latest DeployLogLen deploys, newest first, with a TTL.
func TestDeployLog(t *testing.T) {
	s, r := newStore(t)
	ctx := context.Background()
	if got, err := s.RecentDeploys(ctx, "d"); err != nil || len(got) != 0 {
		t.Fatalf("empty log: %v %v", got, err)
	}
	start := time.UnixMilli(1_700_000_000_000).UTC()
	for i := range DeployLogLen + 5 {
		rec := DeployRecord{At: start.Add(time.Duration(i) * time.Second), Took: time.Duration(i) * time.Millisecond, Result: "ok"}
		if err := s.LogDeploy(ctx, "d", rec); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.RecentDeploys(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != DeployLogLen {
		t.Fatalf("%d entries, want %d", len(got), DeployLogLen)
	}
	newest := DeployLogLen + 4
	if !got[0].At.Equal(start.Add(time.Duration(newest)*time.Second)) || got[0].Took != time.Duration(newest)*time.Millisecond || got[0].Result != "ok" {
		t.Fatalf("newest entry: %+v", got[0])
	}
	if ttl := r.Admin.PTTL(ctx, s.Keys().Scope("d").DeployLog).Val(); ttl <= 0 || ttl > DeployLogTTL {
		t.Fatalf("TTL %v, want up to %v", ttl, DeployLogTTL)
	}
}

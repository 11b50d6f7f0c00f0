package lua

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/warmpool/warmpool"
)

// RepairReport is what scope_repair.lua fixed.
type RepairReport struct {
	SlotCounts, Sessions, Claims, Waiters, Deploys int
}

// Any reports whether anything was fixed.
func (r RepairReport) Any() bool { return r != RepairReport{} }

// Repair runs scope_repair.lua over one scope: expired leftovers always go; with
// recount, every slot count is recomputed from the sessions and claims too.
func (s *Store) Repair(ctx context.Context, scope string, now, noteDeadline time.Time, recount bool) (RepairReport, error) {
	k := s.keys.Scope(scope)
	flag := "0"
	if recount {
		flag = "1"
	}
	out, err := s.run(ctx, ScopeRepair, scope,
		[]string{k.Epoch, k.Pods, k.Slots, k.Idle, k.Deploying, k.Followers, k.Claims, k.ClaimPod, k.Sessions, k.SessExp, k.Waiters},
		ms(now), ms(noteDeadline), flag)
	if err != nil {
		return RepairReport{}, err
	}
	n := make([]int, len(out))
	for i, v := range out {
		n[i], _ = strconv.Atoi(v)
	}
	return RepairReport{SlotCounts: n[0], Sessions: n[1], Claims: n[2], Waiters: n[3], Deploys: n[4]}, nil
}

// Adopt outcomes.
const (
	AdoptAdopted = "adopted"
	AdoptKnown   = "known"
	AdoptFull    = "full"
	// AdoptGone: the pod was purged within GoneTTL; it is not taken back.
	AdoptGone = "gone"
)

// GoneTTL is how long a purged pod's tombstone keeps reconcile from adopting it: longer
// than the purging job takes to delete it and than a driver's list lags behind.
const GoneTTL = 2 * time.Minute

// Adopt takes a pod the driver has into the scope's idle pool.
func (s *Store) Adopt(ctx context.Context, pod warmpool.Pod, now time.Time) (string, error) {
	k := s.keys.Scope(pod.ScopeID)
	info, err := json.Marshal(pod)
	if err != nil {
		return "", err
	}
	out, err := s.run(ctx, PodAdopt, pod.ScopeID,
		[]string{k.Config, k.Pods, k.PodVer, k.PodInfo, k.Slots, k.Idle, k.Deploying, k.Gone(pod.ID)},
		ms(now), pod.ID, pod.DeployVer, string(info))
	if err != nil {
		return "", err
	}
	return out[0], nil
}

// RaiseFence makes the scope's fencing counter at least min.
func (s *Store) RaiseFence(ctx context.Context, scope string, min int64) error {
	_, err := s.run(ctx, FenceRaise, scope, []string{s.keys.Scope(scope).Fence}, min)
	return err
}

// RecordProbe counts a pod's consecutive failed probes and returns the count.
func (s *Store) RecordProbe(ctx context.Context, scope, pod string, ok bool) (int, error) {
	k := s.keys.Scope(scope)
	flag := "0"
	if ok {
		flag = "1"
	}
	out, err := s.run(ctx, PodHealth, scope, []string{k.Pods, k.Health}, pod, flag)
	if err != nil {
		return 0, err
	}
	n, _ := strconv.Atoi(out[0])
	return n, nil
}

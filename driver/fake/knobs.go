package fake

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
)

// DeployRecord is one Deploy call seen by a Driver.
type DeployRecord struct {
	Req warmpool.DeployRequest
	// Env is the environment the pod's agent would get: the scope's plain env and the
	// agent env of SPEC §11.2 (DeployRequest.WithAgentEnv).
	Env map[string]string
	// Pod is the pod the call returned; zero when Err is set or while in flight.
	Pod   warmpool.Pod
	Start time.Time
	// End is when the call returned; zero while it is in flight.
	End time.Time
	Err error
}

// SetDeployDelay changes DeployDelay for deploys that start afterwards.
func (f *Driver) SetDeployDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.DeployDelay = d
}

// FailNext makes the next n deploys fail with DEPLOY_FAILED and msg, after their delay.
// It replaces any earlier FailNext that has not run out.
func (f *Driver) FailNext(n int, msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failN, f.failMsg = n, msg
}

// Hold makes deploys block (after they have created their not-yet-ready pod) until
// release is called, so a test can line up concurrent deploys and look at them in
// flight; a deploy held past its ready timeout fails, as a stuck pod would. Holds nest:
// deploys run again once every release has been called. Calling release more than once
// is harmless.
func (f *Driver) Hold() (release func()) {
	defer f.lock()()
	if f.holds == 0 {
		f.holdCh = make(chan struct{})
	}
	f.holds++
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.holds--
			if f.holds == 0 {
				close(f.holdCh)
				f.holdCh = nil
			}
			f.notifyLocked()
		})
	}
}

// SetProbe makes Probe of podID return err; nil makes the pod healthy again.
func (f *Driver) SetProbe(podID string, err error) {
	defer f.lock()()
	if err == nil {
		delete(f.probes, podID)
	} else {
		f.probes[podID] = err
	}
	f.notifyLocked()
}

// Kill marks the pod dead with reason (as if its process crashed or its node was lost):
// List reports it Dead and not Ready, Probe fails, and it stays listed until deleted.
// Killing an unknown pod does nothing.
func (f *Driver) Kill(podID, reason string) {
	defer f.lock()()
	e, ok, err := f.reg.get(podID)
	if !ok || err != nil {
		mustNot(err)
		return
	}
	if reason == "" {
		reason = "killed"
	}
	e.Dead, e.Ready = reason, false
	mustNot(f.reg.put(e))
	f.notifyLocked()
	f.reportLocked(e.pod(), false)
}

// mustNot panics on an error of a test knob that has no error to return.
func mustNot(err error) {
	if err != nil {
		panic(fmt.Sprintf("fake driver: %v", err))
	}
}

// AddExternal adds a pod that nobody deployed through this driver, as reconcile finds
// pods another replica (or an earlier life of the service) created. Empty URLs and
// CreatedAt are filled; the pod is Ready unless Dead is set.
func (f *Driver) AddExternal(pod warmpool.Pod) {
	defer f.lock()()
	if pod.SSEURL == "" {
		pod.SSEURL = fakeURL(pod.ID, warmpool.DefaultSSEPath)
	}
	if pod.HealthURL == "" {
		pod.HealthURL = fakeURL(pod.ID, warmpool.DefaultHealthPath)
	}
	if pod.CreatedAt == 0 {
		pod.CreatedAt = warmpool.UnixMs(time.Now())
	}
	e := entry{Pod: pod, Ready: pod.Dead == "", Dead: pod.Dead, Token: warmpool.NewID()}
	mustNot(f.reg.put(e))
	f.notifyLocked()
	f.reportLocked(e.pod(), false)
}

// Pods returns every pod the driver has, like List without a context; it panics when
// a shared driver cannot read its directory.
func (f *Driver) Pods() []warmpool.Pod {
	pods, err := f.pods()
	mustNot(err)
	return pods
}

// Deploys returns a copy of every deploy record, in the order the calls started (none
// in the Driver of `serve --driver fake`, which keeps no records; so for InFlight and
// MaxOverlap).
func (f *Driver) Deploys() []DeployRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]DeployRecord, len(f.records))
	for i, r := range f.records {
		out[i] = *r
	}
	return out
}

// DeployCount is the number of Deploy calls so far, failed and in-flight ones included.
func (f *Driver) DeployCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started
}

// InFlight is the number of Deploy calls that have started and not yet returned.
func (f *Driver) InFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.records {
		if r.End.IsZero() {
			n++
		}
	}
	return n
}

// MaxOverlap is the largest number of deploys whose [Start, End) windows overlap; an
// in-flight deploy's window is open-ended.
func (f *Driver) MaxOverlap() int {
	type event struct {
		at    time.Time
		delta int
	}
	f.mu.Lock()
	events := make([]event, 0, 2*len(f.records))
	for _, r := range f.records {
		switch {
		case r.End.IsZero():
			events = append(events, event{r.Start, +1})
		case r.End.After(r.Start): // an empty window overlaps nothing
			events = append(events, event{r.Start, +1}, event{r.End, -1})
		}
	}
	f.mu.Unlock()
	// Ends sort before starts at the same instant: the windows are half-open.
	slices.SortFunc(events, func(a, b event) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.delta, b.delta))
	})
	cur, best := 0, 0
	for _, e := range events {
		cur += e.delta
		best = max(best, cur)
	}
	return best
}

// Deleted returns the ids passed to Delete, in order, including ids that were missing.
func (f *Driver) Deleted() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.deleted)
}

// Changed returns a channel that is closed at the driver's next change (a deploy starting
// or ending, a pod added, killed or deleted, a hold released). Tests await a condition
// with it instead of sleeping: take the channel, check the condition, then wait on it.
func (f *Driver) Changed() <-chan struct{} {
	defer f.lock()()
	return f.changed
}

// WaitInFlight blocks until at least n deploys are in flight, or ctx ends.
func (f *Driver) WaitInFlight(ctx context.Context, n int) error {
	for {
		ch := f.Changed()
		if f.InFlight() >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("fake: waiting for %d deploys in flight (have %d): %w", n, f.InFlight(), ctx.Err())
		}
	}
}

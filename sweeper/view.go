package sweeper

import (
	"container/heap"
	"hash/fnv"
	"time"

	"github.com/warmpool/warmpool"
)

// The watch's view of a shard's pods: what the driver's pod events (or, for a driver
// without them, its lists) said of each pod, and the live pods ordered by the time the
// watch next looks at them for a probe, so that a run looks only at the pods whose
// probe time has come (O(pods due), not O(pods)).

// viewPod is one pod of the view with its place in the probe schedule.
type viewPod struct {
	pod  warmpool.Pod
	hash uint64 // fnv64a of the pod id: its offset within any probe period
	// next is when the watch next looks at the pod (ms): a probe time of the pod, or 0
	// (at the next run) for a pod new to the view or whose period changed.
	next int64
	idx  int // the pod's index in the schedule; -1 while it is not in it (dead)
}

// schedule is a min-heap of the live pods of a shard by next (container/heap).
type schedule []*viewPod

func (s schedule) Len() int           { return len(s) }
func (s schedule) Less(i, j int) bool { return s[i].next < s[j].next }
func (s schedule) Swap(i, j int) {
	s[i], s[j] = s[j], s[i]
	s[i].idx, s[j].idx = i, j
}

func (s *schedule) Push(x any) {
	p := x.(*viewPod)
	p.idx = len(*s)
	*s = append(*s, p)
}

func (s *schedule) Pop() any {
	old := *s
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*s = old[:len(old)-1]
	p.idx = -1
	return p
}

// shardView is the view of one shard's pods.
type shardView struct {
	pods    map[string]*viewPod
	byScope map[string]map[string]*viewPod
	due     schedule
}

func newShardView() *shardView {
	return &shardView{pods: map[string]*viewPod{}, byScope: map[string]map[string]*viewPod{}}
}

// pod is the pod of the view with this id.
func (v *shardView) pod(id string) (warmpool.Pod, bool) {
	vp, ok := v.pods[id]
	if !ok {
		return warmpool.Pod{}, false
	}
	return vp.pod, true
}

// put sets p in the view. A live pod new to the schedule is looked at by the next run
// (probed if its probe time falls in that run's window); a pod that died leaves the
// schedule.
func (v *shardView) put(p warmpool.Pod) {
	vp := v.pods[p.ID]
	if vp == nil {
		h := fnv.New64a()
		h.Write([]byte(p.ID))
		vp = &viewPod{hash: h.Sum64(), idx: -1}
		v.pods[p.ID] = vp
		if v.byScope[p.ScopeID] == nil {
			v.byScope[p.ScopeID] = map[string]*viewPod{}
		}
		v.byScope[p.ScopeID][p.ID] = vp
	}
	vp.pod = p
	switch {
	case p.Dead != "" && vp.idx >= 0:
		heap.Remove(&v.due, vp.idx)
	case p.Dead == "" && vp.idx < 0:
		vp.next = 0
		heap.Push(&v.due, vp)
	}
}

// remove takes a pod out of the view.
func (v *shardView) remove(id string) {
	vp := v.pods[id]
	if vp == nil {
		return
	}
	if vp.idx >= 0 {
		heap.Remove(&v.due, vp.idx)
	}
	delete(v.pods, id)
	if m := v.byScope[vp.pod.ScopeID]; m != nil {
		delete(m, id)
		if len(m) == 0 {
			delete(v.byScope, vp.pod.ScopeID)
		}
	}
}

// lookAgain makes the next run look at every live pod of scope: its probe period
// changed, and with it each pod's probe times.
func (v *shardView) lookAgain(scope string) {
	for _, vp := range v.byScope[scope] {
		if vp.idx >= 0 {
			vp.next = 0
			heap.Fix(&v.due, vp.idx)
		}
	}
}

// popDue returns the live pods that have a probe time in the window (since, now], of
// those whose time to be looked at has come, and schedules each of those again at its
// first probe time after now; looked is how many it looked at. A pod's probe times
// are its own offset within its scope's probe period (period) plus whole periods, on
// the callers' clock, so replicas taking turns at the shard's runs probe each pod once
// per period: a pod another replica probed in its window is looked at here and not
// probed.
func (v *shardView) popDue(since, now time.Time, period func(scope string) time.Duration) (due []warmpool.Pod, looked int) {
	f, t := since.UnixMilli(), now.UnixMilli()
	for len(v.due) > 0 && v.due[0].next <= t {
		vp := v.due[0]
		p := max(period(vp.pod.ScopeID).Milliseconds(), 1)
		if nextProbe(vp.hash, p, f) <= t {
			due = append(due, vp.pod)
		}
		vp.next = nextProbe(vp.hash, p, t)
		heap.Fix(&v.due, 0)
		looked++
	}
	return due, looked
}

// nextProbe is the first probe time after t (ms) of a pod probed every period ms at
// its offset hash mod period. A window (f, t] at least a period long holds one of them.
func nextProbe(hash uint64, period, t int64) int64 {
	offset := int64(hash % uint64(period))
	return t - ((t-offset)%period+period)%period + period
}

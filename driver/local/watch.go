package local

import (
	"time"

	"github.com/warmpool/warmpool"
)

// WatchPeriod is how often a Driver with OnPodEvent functions lists its state
// directory for what its own processes do not tell it: the pods other server
// processes sharing StateDir start, change and remove, and the deaths of pods whose
// server process died.
const WatchPeriod = 250 * time.Millisecond

// watchDir lists the state directory every WatchPeriod until Close, and reports to
// the OnPodEvent functions each pod that appeared, changed (ready, dead) or is gone
// since the last look, as an informer's watch does; seen is the first look.
func (l *Driver) watchDir(seen map[string]warmpool.Pod) {
	defer l.watchers.Done()
	t := time.NewTicker(WatchPeriod)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		pods, err := l.List(l.ctx)
		if err != nil {
			continue // the next look tries again; what changed meanwhile shows then
		}
		cur := make(map[string]warmpool.Pod, len(pods))
		for _, p := range pods {
			cur[p.ID] = p
			if was, ok := seen[p.ID]; !ok || was.Ready != p.Ready || was.Dead != p.Dead {
				l.report(p, false)
			}
		}
		for id, p := range seen {
			if _, ok := cur[id]; !ok {
				l.report(p, true)
			}
		}
		seen = cur
	}
}

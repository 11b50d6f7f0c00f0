package reports

import (
	"sync"
	"time"
)

// capAge is how long a pod's cap, as its last report's answer gave it, bounds its
// next report's body without Redis being asked: an entry not used or renewed for
// between one and two of it is dropped, so the cache holds the pods that reported to
// this replica lately, not every pod that ever did.
const capAge = time.Minute

// capKey names a pod of a scope.
type capKey struct{ scope, pod string }

// capCache keeps the cap of each pod that reported lately (Manager.Cap), in two
// generations: lookups and stores go to the current one, an entry found only in the
// previous one moves up, and every capAge the previous one is dropped whole.
type capCache struct {
	mu        sync.Mutex
	cur, prev map[capKey]int
	rotated   time.Time
}

// rotate drops the previous generation once capAge passed since the last rotation,
// and both after twice that. mu is held.
func (c *capCache) rotate(now time.Time) {
	switch age := now.Sub(c.rotated); {
	case c.cur == nil || age >= 2*capAge:
		c.prev, c.cur, c.rotated = nil, map[capKey]int{}, now
	case age >= capAge:
		c.prev, c.cur, c.rotated = c.cur, map[capKey]int{}, now
	}
}

func (c *capCache) get(k capKey, now time.Time) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rotate(now)
	if n, ok := c.cur[k]; ok {
		return n, true
	}
	n, ok := c.prev[k]
	if ok {
		c.cur[k] = n
	}
	return n, ok
}

func (c *capCache) put(k capKey, n int, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rotate(now)
	c.cur[k] = n
}

func (c *capCache) drop(k capKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cur, k)
	delete(c.prev, k)
}

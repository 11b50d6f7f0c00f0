package model

import (
	"time"

	"github.com/warmpool/warmpool/redisstore"
)

// backoff is the scope's refill backoff key (k.backoff): failures 0 is no key.
type backoff struct {
	failures int64
	until    int64
	err      string
}

// backoffRefusal is lib/deploy.lua's backoff_refusal: the answer to a deploy the
// backoff holds back (before its end, or from then on while a deploy is in flight),
// false when a deploy may start.
func (s *Scope) backoffRefusal(now int64, deploys int) (redisstore.Backoff, bool) {
	b := s.backoff
	if b.failures == 0 || (now >= b.until && deploys == 0) {
		return redisstore.Backoff{}, false
	}
	return s.backoffState(), true
}

// backoffState is the backoff as a snapshot reads it.
func (s *Scope) backoffState() redisstore.Backoff {
	if s.backoff.failures == 0 {
		return redisstore.Backoff{}
	}
	return redisstore.Backoff{Failures: int(s.backoff.failures), Until: time.UnixMilli(s.backoff.until), LastError: s.backoff.err}
}

// backoffFailed is deploy_abort.lua's count of a failed deploy of deploy_ver ver:
// failures + 1, and no deploy before now + base * 2^(failures - 1), at most the cap.
func (s *Scope) backoffFailed(ver, reason string, now int64) {
	if cur, ok := s.config["deploy_ver"]; !ok || cur != ver {
		return
	}
	s.backoff.failures++
	wait, most := redisstore.RefillBackoffBase.Milliseconds(), redisstore.RefillBackoffMax.Milliseconds()
	for i := int64(1); i < s.backoff.failures && wait < most; i++ {
		wait *= 2
	}
	s.backoff.until, s.backoff.err = now+min(wait, most), reason
}

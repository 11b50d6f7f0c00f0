package model

import (
	"time"

	"github.com/warmpool/warmpool/redisstore"
)

// setFixed marks the session's expiry fixed, or not.
func (s *Scope) setFixed(sid string, fixed bool) {
	if fixed {
		s.fixed[sid] = true
	} else {
		delete(s.fixed, sid)
	}
}

// SessionDeadline models session_deadline.lua: a live, bound session's expiry is fixed
// at now + ttl (with later, at the later of that and its expiry); an expired one is
// evicted.
func (s *Scope) SessionDeadline(sid string, now time.Time, ttl time.Duration, later bool) (redisstore.DeadlineResult, error) {
	if err := s.publishedRefused(); err != nil {
		return redisstore.DeadlineResult{}, err
	}
	t := ms(now)
	e, ok := s.sessExp[sid]
	if _, bound := s.sess[sid]; !ok || !bound {
		return redisstore.DeadlineResult{State: redisstore.DeadlineUnknown}, nil
	}
	if e <= t {
		s.evictSession(sid, t, s.handoff(now))
		return redisstore.DeadlineResult{State: redisstore.DeadlineExpired}, nil
	}
	expiry := t + ttl.Milliseconds()
	if later {
		expiry = max(expiry, e)
	}
	s.sessExp[sid] = expiry
	s.fixed[sid] = true
	return redisstore.DeadlineResult{State: redisstore.DeadlineSet, Expiry: time.UnixMilli(expiry)}, nil
}

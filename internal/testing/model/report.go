package model

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// AgentReport models agent_report.lua.
func (s *Scope) AgentReport(rep redisstore.AgentReport) (redisstore.AgentAnswer, error) {
	if err := s.publishedRefused(); err != nil {
		if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
			return redisstore.AgentAnswer{}, redisstore.ErrPodUnknown
		}
		return redisstore.AgentAnswer{}, err
	}
	pod := rep.Pod
	if _, ok := s.pods[pod]; !ok {
		return redisstore.AgentAnswer{}, redisstore.ErrPodUnknown
	}
	pc := s.cfgInt("pod_concurrency")
	most := max(pc, s.slots[pod])
	if int64(len(rep.Sessions)) > most {
		return redisstore.AgentAnswer{}, warmpool.TooManySessions(len(rep.Sessions), int(most))
	}
	now := ms(rep.Now)
	expiry := now + s.cfgInt("session_ttl_ms")
	interval := int64(warmpool.DefaultReportIntervalS) * 1000
	if v, ok := s.config["report_ms"]; ok {
		interval, _ = strconv.ParseInt(v, 10, 64)
	}
	q := s.handoff(rep.Now)
	if rep.Draining && s.podVer[pod] != redisstore.RetiredVer {
		s.podVer[pod] = redisstore.DrainingVer
	}
	adopted := func() string {
		for n := int64(1); n <= 2*pc; n++ {
			c := "adopted:" + pod + ":" + strconv.FormatInt(n, 10)
			if d, ok := s.claims[c]; ok && d > now && s.claimOf[c] == pod {
				return c
			}
		}
		return ""
	}
	proven := map[string]bool{}
	for _, sid := range rep.Proven {
		proven[sid] = true
	}
	listed := map[string]bool{}
	unknown := []string{}
	onPod := int64(0)
	for _, sid := range rep.Sessions {
		if listed[sid] {
			continue
		}
		listed[sid] = true
		bound, isBound := s.sess[sid]
		c := ""
		if !isBound && proven[sid] {
			c = adopted()
		}
		switch {
		case isBound && bound == pod:
			if !s.fixed[sid] {
				s.sessExp[sid] = expiry
			}
			onPod++
		case c != "":
			delete(s.claims, c)
			delete(s.claimOf, c)
			s.sess[sid] = pod
			s.sessExp[sid] = expiry
			onPod++
		default:
			unknown = append(unknown, sid)
		}
	}
	ended := 0
	missKey := pod + "|miss"
	if s.config["sessions_from_reports"] == "1" {
		var missed []string
		if onPod < s.slots[pod] {
			before := map[string]bool{}
			for _, sid := range strings.Fields(s.agents[missKey]) {
				before[sid] = true
			}
			for _, sid := range slices.Sorted(maps.Keys(s.sess)) {
				if s.sess[sid] != pod || listed[sid] {
					continue
				}
				if before[sid] {
					s.evictSession(sid, now, q)
					ended++
				} else {
					missed = append(missed, sid)
				}
			}
		}
		if len(missed) > 0 {
			s.agents[missKey] = strings.Join(missed, " ")
		} else {
			delete(s.agents, missKey)
		}
	}
	a := redisstore.AgentAnswer{Interval: time.Duration(interval) * time.Millisecond, Unknown: unknown, Ended: ended, Most: int(most)}
	until, ok := s.agents[pod]
	if t, _ := strconv.ParseInt(until, 10, 64); !ok || t-now < 2*interval {
		spared := now + 3*interval
		s.agents[pod] = strconv.FormatInt(spared, 10)
		a.SparedUntil = time.UnixMilli(spared)
	}
	return a, nil
}

// reportIntervalS is the report interval a deploy's answer tells the pod, in seconds
// (pod_acquire.lua, pod_placeholder.lua): 0 when the config published has none.
func (s *Scope) reportIntervalS() int {
	v, _ := strconv.ParseInt(s.config["report_ms"], 10, 64)
	return int(v / 1000)
}

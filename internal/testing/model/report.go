package model

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// AgentReport models redisstore.Store.AgentReport: agent_report.lua, and in a scope
// governed in sessions the sessions it asks of the tenant's escrow (whatever the
// quota) for the sessions it binds again, the run again, and what it did not bind
// given back.
func (s *Scope) AgentReport(rep redisstore.AgentReport) (redisstore.AgentAnswer, error) {
	var took int64
	var tenant string
	for try := 1; ; try++ {
		a, escrowed, ask, err := s.agentReport(rep, took)
		if err == nil && ask != nil {
			switch {
			case try == quotaTries:
				err = warmpool.Errorf(warmpool.CodeNoPodAvailable, "scope %q: the sessions its tenant's escrow gave the report were taken by other calls %d times in a row; retry", s.id, quotaTries)
			case s.tenants == nil:
				err = fmt.Errorf("model: scope %q is governed but joined no tenants", s.id)
			default:
				if err = s.tenants.tenantGrant(ask.tenant, s.id, dims[1], ask.held, 0, 0, true); err == nil {
					took, tenant = took+ask.held, ask.tenant
					continue
				}
			}
		}
		unused := took
		if err == nil {
			unused = escrowed
		}
		if unused > 0 {
			s.tenants.tenantCredit(tenant, s.id, dims[1], unused)
		}
		if err != nil {
			return redisstore.AgentAnswer{}, err
		}
		return a, nil
	}
}

// agentReport models one run of agent_report.lua with took sessions escrowed for it:
// the answer, how many of them it left unused, and its "escrow" answer (the sessions
// it asks for in held).
func (s *Scope) agentReport(rep redisstore.AgentReport, took int64) (redisstore.AgentAnswer, int64, *quotaAsk, error) {
	if err := s.publishedRefused(); err != nil {
		if warmpool.ErrorCode(err) == warmpool.CodeScopeNotFound {
			return redisstore.AgentAnswer{}, 0, nil, redisstore.ErrPodUnknown
		}
		return redisstore.AgentAnswer{}, 0, nil, err
	}
	pod := rep.Pod
	if _, ok := s.pods[pod]; !ok {
		return redisstore.AgentAnswer{}, 0, nil, redisstore.ErrPodUnknown
	}
	pc := s.cfgInt("pod_concurrency")
	most := max(pc, s.slots[pod])
	if int64(len(rep.Sessions)) > most {
		return redisstore.AgentAnswer{}, 0, nil, warmpool.TooManySessions(len(rep.Sessions), int(most))
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
	escrowed := took
	// escrow is the script's escrow_refusal for a binding of the i-th listed session.
	escrow := func(i int) *quotaAsk {
		v, governed := s.config[allowance[1]]
		q, _ := strconv.ParseInt(v, 10, 64)
		if !governed || int64(len(s.sess)) < q {
			return nil
		}
		if escrowed > 0 {
			escrowed--
			s.config[allowance[1]] = strconv.FormatInt(q+1, 10)
			return nil
		}
		want, seen := int64(1), map[string]bool{}
		for _, sid := range rep.Sessions[i+1:] {
			if proven[sid] && !listed[sid] && !seen[sid] {
				seen[sid] = true
				want++
			}
		}
		return &quotaAsk{dim: dims[1], held: min(want, most), tenant: s.config["tenant"]}
	}
	for i, sid := range rep.Sessions {
		if listed[sid] {
			continue
		}
		listed[sid] = true
		bound, isBound := s.sess[sid]
		c := ""
		if !isBound && proven[sid] {
			c = adopted()
		}
		if c != "" {
			if ask := escrow(i); ask != nil {
				return redisstore.AgentAnswer{}, 0, ask, nil
			}
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
	return a, escrowed, nil, nil
}

// reportIntervalS is the report interval a deploy's answer tells the pod, in seconds
// (pod_acquire.lua, pod_placeholder.lua): 0 when the config published has none.
func (s *Scope) reportIntervalS() int {
	v, _ := strconv.ParseInt(s.config["report_ms"], 10, 64)
	return int(v / 1000)
}

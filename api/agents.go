package api

import (
	"net/http"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
)

// agentReport answers POST /v1/agents/report (SPEC §11.2): a pod's agent reports with
// its own token, which only the report key checks; the gateway and admin tokens are
// not report tokens. Every report is counted by its result.
func (a *handlers) agentReport(w http.ResponseWriter, r *http.Request) error {
	ans, err := a.report(w, r)
	a.ObserveReport(err)
	if err != nil {
		return err
	}
	return httpx.OK(w, ans)
}

// report checks the token before it reads a byte of the body: the token names the pod
// it speaks for. Then it reads at most the body of a report of the sessions the pod
// may hold (its scope's pod_concurrency, as the pod's last report here was answered,
// or one read), which must name the same pod. A report that a cached cap refuses
// asks Redis: one listing more sessions goes on if the cap of the moment allows them,
// one too long is refused and the next report asks.
func (a *handlers) report(w http.ResponseWriter, r *http.Request) (warmpool.ReportAnswer, error) {
	scope, pod, err := a.ReportKey.Identify(r)
	if err != nil {
		return warmpool.ReportAnswer{}, err
	}
	most, cached, err := a.Reports.Cap(r.Context(), scope, pod, false)
	if err != nil {
		return warmpool.ReportAnswer{}, err
	}
	var req warmpool.AgentReport
	if err := httpx.DecodeAtMost(w, r, &req, warmpool.ReportBodyLimit(most)); err != nil {
		if cached && warmpool.ErrorCode(err) == warmpool.CodePayloadTooLarge {
			_, _, _ = a.Reports.Cap(r.Context(), scope, pod, true) // the next report asks Redis
		}
		return warmpool.ReportAnswer{}, err
	}
	if req.ScopeID != scope || req.PodID != pod {
		return warmpool.ReportAnswer{}, warmpool.Errorf(warmpool.CodeUnauthorized,
			"the report names pod %q of scope %q, its token another: a pod reports with its own WARMPOOL_REPORT_TOKEN", req.PodID, req.ScopeID)
	}
	if len(req.Sessions) > most && cached {
		if most, _, err = a.Reports.Cap(r.Context(), scope, pod, true); err != nil {
			return warmpool.ReportAnswer{}, err
		}
	}
	if len(req.Sessions) > most {
		return warmpool.ReportAnswer{}, warmpool.TooManySessions(len(req.Sessions), most)
	}
	if err := req.Check(); err != nil {
		return warmpool.ReportAnswer{}, err
	}
	return a.Reports.Report(r.Context(), req)
}

// agentSessionConfig answers GET /v1/agents/sessions/{session}/config (SPEC §12.2): the
// env of a session (or hold) bound to the pod whose report token the call carries,
// its secret refs resolved now. Another pod's session, an ended or unknown one: 404
// SESSION_NOT_FOUND.
func (a *handlers) agentSessionConfig(w http.ResponseWriter, r *http.Request) error {
	scope, pod, err := a.ReportKey.Identify(r)
	if err != nil {
		return err
	}
	session, err := httpx.Session(r)
	if err != nil {
		return err
	}
	env, err := a.SessionConfigs.Env(r.Context(), scope, pod, session)
	if err != nil {
		return err
	}
	return httpx.OK(w, map[string]map[string]string{"env": env})
}

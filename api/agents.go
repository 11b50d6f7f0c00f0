package api

import (
	"net/http"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/internal/metrics"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/reports"
)

// agentReport answers POST /v1/agents/report (SPEC §11.2): a pod's agent reports with
// its own token, which only the report key checks; the gateway and admin tokens are
// not report tokens. Every report is counted by its result.
func (a *handlers) agentReport(w http.ResponseWriter, r *http.Request) error {
	ans, err := a.report(w, r)
	a.ObserveReport(reportResult(err))
	if err != nil {
		return err
	}
	return httpx.OK(w, ans)
}

// report checks the token before it reads a byte of the body: the token names the pod
// it speaks for. Then it reads at most the body of a report of the sessions the pod
// may hold (its scope's pod_concurrency: one read), which must name the same pod.
func (a *handlers) report(w http.ResponseWriter, r *http.Request) (reports.Answer, error) {
	scope, pod, err := a.ReportKey.Identify(r)
	if err != nil {
		return reports.Answer{}, err
	}
	most, err := a.Reports.Cap(r.Context(), scope, pod)
	if err != nil {
		return reports.Answer{}, err
	}
	var req reports.Report
	if err := httpx.DecodeAtMost(w, r, &req, reports.BodyLimit(most)); err != nil {
		return reports.Answer{}, err
	}
	if req.ScopeID != scope || req.PodID != pod {
		return reports.Answer{}, warmpool.Errorf(warmpool.CodeUnauthorized,
			"the report names pod %q of scope %q, its token another: a pod reports with its own WARMPOOL_REPORT_TOKEN", req.PodID, req.ScopeID)
	}
	if len(req.Sessions) > most {
		return reports.Answer{}, redisstore.TooManySessions(len(req.Sessions), most)
	}
	if err := req.Check(); err != nil {
		return reports.Answer{}, err
	}
	return a.Reports.Report(r.Context(), req)
}

// reportResult is the result label of a report answered err.
func reportResult(err error) string {
	if err == nil {
		return metrics.ReportOK
	}
	switch warmpool.ErrorCode(err) {
	case warmpool.CodeUnauthorized:
		return metrics.ReportUnauthorized
	case warmpool.CodePodNotFound:
		return metrics.ReportPodNotFound
	case warmpool.CodeValidation, warmpool.CodePayloadTooLarge:
		return metrics.ReportInvalid
	}
	return metrics.ReportUnavailable
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

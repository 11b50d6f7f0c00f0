package api

import (
	"net/http"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/internal/metrics"
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

func (a *handlers) report(w http.ResponseWriter, r *http.Request) (reports.Answer, error) {
	if a.ReportKey == nil || !httpx.HasBearer(r) {
		return reports.Answer{}, a.ReportKey.Check(r, "", "")
	}
	var req reports.Report
	if err := httpx.Decode(w, r, &req, false); err != nil {
		return reports.Answer{}, err
	}
	if err := req.Check(); err != nil {
		return reports.Answer{}, err
	}
	if err := a.ReportKey.Check(r, req.ScopeID, req.PodID); err != nil {
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

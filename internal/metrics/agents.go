package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/warmpool/warmpool"
)

// Results of agent reports (warmpool_agent_reports_total{result}).
const (
	ReportOK           = "ok"
	ReportUnauthorized = "unauthorized"
	ReportPodNotFound  = "pod_not_found"
	ReportInvalid      = "invalid"
	ReportUnavailable  = "unavailable"
)

// newAgentReports is warmpool_agent_reports_total, every result's series there from
// the start at 0.
func newAgentReports() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warmpool_agent_reports_total",
		Help: "Agent reports (POST /v1/agents/report) by result: ok, unauthorized (no, another pod's or a wrong token), pod_not_found, invalid (a bad body), unavailable (Redis did not answer).",
	}, []string{labelResult})
	for _, r := range []string{ReportOK, ReportUnauthorized, ReportPodNotFound, ReportInvalid, ReportUnavailable} {
		c.WithLabelValues(r)
	}
	return c
}

// ObserveReport counts one agent report by its result, from the error it was
// answered (nil: ok).
func (m *Metrics) ObserveReport(err error) {
	m.reports.WithLabelValues(reportResult(err)).Inc()
}

// reportResult is the result label of a report answered err.
func reportResult(err error) string {
	if err == nil {
		return ReportOK
	}
	switch warmpool.ErrorCode(err) {
	case warmpool.CodeUnauthorized:
		return ReportUnauthorized
	case warmpool.CodePodNotFound:
		return ReportPodNotFound
	case warmpool.CodeValidation, warmpool.CodePayloadTooLarge:
		return ReportInvalid
	}
	return ReportUnavailable
}

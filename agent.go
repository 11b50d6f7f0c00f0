package warmpool

import (
	"cmp"
	"maps"
	"strconv"
)

// AgentConfig is how a scope's agents report (SPEC §11.2). A change to it alone is
// class B: no pod is touched.
type AgentConfig struct {
	// ReportIntervalS is how often each agent reports; a pod that reported within
	// three intervals is alive and is not probed.
	ReportIntervalS int `json:"report_interval_s"`
	// SessionsFromReports makes the reports the ground truth of a pod's sessions: a
	// session bound to the pod that two reports in a row leave out is ended.
	SessionsFromReports bool `json:"sessions_from_reports"`
}

// The agent section's defaults and limits.
const (
	DefaultReportIntervalS = 5
	MaxReportIntervalS     = 3600
	// ReportFreshIntervals is how many report intervals a report keeps a pod alive
	// without a probe.
	ReportFreshIntervals = 3
)

// check adds a fault for every bad field of the agent section.
func (a AgentConfig) check(faults *fieldErrors) {
	if a.ReportIntervalS < 1 || a.ReportIntervalS > MaxReportIntervalS {
		faults.add("agent.report_interval_s", "must be between 1 and %d, got %d", MaxReportIntervalS, a.ReportIntervalS)
	}
}

// The environment every driver gives a pod's agent container when reports are on
// (SPEC §11.2).
const (
	EnvPodID       = "WARMPOOL_POD_ID"
	EnvScope       = "WARMPOOL_SCOPE"
	EnvDeployVer   = "WARMPOOL_DEPLOY_VER"
	EnvReportURL   = "WARMPOOL_REPORT_URL"
	EnvReportToken = "WARMPOOL_REPORT_TOKEN"
	// EnvReportInterval is the scope's agent.report_interval_s (SPEC §12.4): the agent
	// reports once at start, then at that interval until an answer's next_report_s.
	EnvReportInterval = "WARMPOOL_REPORT_INTERVAL_S"
)

// The states an agent reports.
const (
	AgentReady    = "ready"
	AgentDraining = "draining"
)

// ReportTarget is where a replica's pods report: the report URL (`--report-url`) and
// the function that gives each pod its own token (an HMAC of scope and pod id under
// the shared report secret). A driver passes both on through DeployRequest.AgentEnv.
type ReportTarget struct {
	URL   string
	Token func(scope, pod string) string
}

// AgentEnv is the environment of the agent container of the pod podID that r deploys:
// the pod's identity, and where, with which token and how often it reports when
// r.Report is set (nil otherwise: reports are off). Every driver adds it to the agent
// container's env, over the scope's own values.
func (r DeployRequest) AgentEnv(podID string) map[string]string {
	if r.Report == nil || r.Report.URL == "" {
		return nil
	}
	return map[string]string{
		EnvPodID:       podID,
		EnvScope:       r.ScopeID,
		EnvDeployVer:   r.DeployVer,
		EnvReportURL:   r.Report.URL,
		EnvReportToken: r.Report.Token(r.ScopeID, podID),
		// An interval the deploy does not know is the default, which a config without
		// one has.
		EnvReportInterval: strconv.Itoa(cmp.Or(r.ReportIntervalS, DefaultReportIntervalS)),
	}
}

// WithAgentEnv is env (the scope's deploy.env) with the agent env of podID over it, as
// a new map; env itself is not changed.
func (r DeployRequest) WithAgentEnv(env map[string]string, podID string) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, r.AgentEnv(podID))
	return out
}

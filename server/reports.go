package server

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/reports"
)

// checkReports reports a report configuration that cannot work.
func (c *Config) checkReports() error {
	if c.ReportSecret != "" && c.ReportSecretFile != "" {
		return errors.New("give the report secret once: --report-secret or --report-secret-file")
	}
	if c.ReportURL == "" {
		return nil
	}
	if c.ReportSecret == "" && c.ReportSecretFile == "" {
		return errors.New("--report-url needs --report-secret or --report-secret-file: every pod's report token is made under it")
	}
	u, err := url.Parse(c.ReportURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--report-url %q: want an http:// or https:// URL of the replicas (e.g. the Service's)", c.ReportURL)
	}
	return nil
}

// buildReports builds the report manager and the report key of the replica, and
// returns where its pods report (nil when --report-url is not set: the pods are told
// nothing, and the report route still takes reports when a secret is set).
func (s *Server) buildReports() (*warmpool.ReportTarget, error) {
	cfg := s.cfg
	secret, err := s.token(cfg.ReportSecret, cfg.ReportSecretFile)
	if err != nil {
		return nil, fmt.Errorf("report secret: %w", err)
	}
	s.reportKey = httpx.NewReportKey(secret)
	rc := reports.Config{Clock: cfg.Clock, Logger: s.log}
	if s.reportKey != nil {
		rc.ValidTicket = s.reportKey.ValidTicket
	}
	s.Reports = reports.New(s.store, rc)
	if cfg.ReportURL == "" {
		return nil, nil
	}
	return &warmpool.ReportTarget{URL: cfg.ReportURL, Token: s.reportKey.Token}, nil
}

// ReportToken is the report token of a pod, as the replica gives it to the pod (""
// when reports are off): for tests and tools that report as a pod would.
func (s *Server) ReportToken(scope, pod string) string {
	if s.reportKey == nil {
		return ""
	}
	return s.reportKey.Token(scope, pod)
}

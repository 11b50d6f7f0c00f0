package server

import (
	"net/http"

	"github.com/warmpool/warmpool/e2b"
	"github.com/warmpool/warmpool/internal/httpx"
)

// e2bRoutes is the E2B front door (Config.E2BListen): its router, over the replica's
// session manager and store, behind the middleware of the main listener's routes;
// X-API-Key is checked against the gateway and admin tokens.
func (s *Server) e2bRoutes(gateway, admin *httpx.Token) http.Handler {
	door := e2b.New(e2b.Config{Sessions: s.SM, Records: s.store, Scopes: s.store, Configs: s.sessionConfigs,
		Gateway: gateway, Admin: admin, Clock: s.cfg.Clock, Logger: s.log})
	return door.Handler(httpx.RequestID, httpx.AccessLog(s.log), s.closeWhileDraining, httpx.Bounds(s.cfg.HTTP.Call, s.cfg.HTTP.Wait))
}

// E2BAddr is the address of the E2B front door ("" when it is off).
func (s *Server) E2BAddr() string {
	if s.e2bLn == nil {
		return ""
	}
	return s.e2bLn.Addr().String()
}

// E2BHandler is the E2B front door's handler (nil when it is off).
func (s *Server) E2BHandler() http.Handler { return s.e2b }

package api

import (
	"net/http"

	"github.com/warmpool/warmpool/internal/httpx"
)

// poolPageState answers GET /v1/ui/state: what the pool page shows.
func (a *handlers) poolPageState(w http.ResponseWriter, r *http.Request) error {
	st, err := a.PoolPage.State(r.Context())
	if err != nil {
		return err
	}
	return httpx.OK(w, st)
}

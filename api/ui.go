package api

import (
	"net/http"

	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/ui"
)

// poolPageState answers GET /v1/ui/state: what the pool page shows (the totals, a
// page of summary rows and the details the query names; ui.ParseQuery).
func (a *handlers) poolPageState(w http.ResponseWriter, r *http.Request) error {
	q, err := ui.ParseQuery(r.URL.Query())
	if err != nil {
		return err
	}
	st, err := a.PoolPage.State(r.Context(), q)
	if err != nil {
		return err
	}
	return httpx.OK(w, st)
}

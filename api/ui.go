package api

import (
	"net/http"

	"github.com/warmpool/warmpool/internal/httpx"
)

// poolPageState answers GET /v1/ui/state: what the pool page shows (the totals, a
// page of summary rows and the details the query names).
func (a *handlers) poolPageState(w http.ResponseWriter, r *http.Request) error {
	st, err := a.PoolPage.PageState(r.Context(), r.URL.Query())
	if err != nil {
		return err
	}
	return httpx.OK(w, st)
}

package httpx

import (
	"net/http"

	"github.com/warmpool/warmpool"
)

// statuses are the HTTP statuses of the codes; any other code is a 500.
var statuses = map[warmpool.Code]int{
	warmpool.CodeValidation:       http.StatusBadRequest,
	warmpool.CodeUnauthorized:     http.StatusUnauthorized,
	warmpool.CodeForbidden:        http.StatusForbidden,
	warmpool.CodeScopeNotFound:    http.StatusNotFound,
	warmpool.CodeSessionNotFound:  http.StatusNotFound,
	warmpool.CodeHoldNotFound:     http.StatusNotFound,
	warmpool.CodeConfigSyncBusy:   http.StatusConflict,
	warmpool.CodePayloadTooLarge:  http.StatusRequestEntityTooLarge,
	warmpool.CodeNoPodAvailable:   http.StatusServiceUnavailable,
	warmpool.CodeQueueFull:        http.StatusServiceUnavailable,
	warmpool.CodeStoreUnavailable: http.StatusServiceUnavailable,
	warmpool.CodeWaitTimeout:      http.StatusGatewayTimeout,
	warmpool.CodeDeployFailed:     http.StatusBadGateway,

	warmpool.CodeIdempotencyMismatch: http.StatusUnprocessableEntity,
	warmpool.CodePodNotFound:         http.StatusNotFound,
	warmpool.CodeTenantNotFound:      http.StatusNotFound,
	warmpool.CodeQuotaExceeded:       http.StatusTooManyRequests,
}

// Status is the HTTP status that goes with the code (SPEC §3).
func Status(c warmpool.Code) int {
	if s, ok := statuses[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

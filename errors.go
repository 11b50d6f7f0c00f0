package warmpool

import (
	"errors"
	"fmt"
)

// Code is one of the error codes of the HTTP contract (SPEC §3).
type Code string

// The error codes, one per row of the SPEC §3 table and its §10 and §11.5 additions.
const (
	CodeValidation       Code = "VALIDATION"
	CodeUnauthorized     Code = "UNAUTHORIZED"
	CodeForbidden        Code = "FORBIDDEN"
	CodeScopeNotFound    Code = "SCOPE_NOT_FOUND"
	CodeSessionNotFound  Code = "SESSION_NOT_FOUND"
	CodeHoldNotFound     Code = "HOLD_NOT_FOUND"
	CodeConfigSyncBusy   Code = "CONFIG_SYNC_BUSY"
	CodePayloadTooLarge  Code = "PAYLOAD_TOO_LARGE"
	CodeNoPodAvailable   Code = "NO_POD_AVAILABLE"
	CodeQueueFull        Code = "QUEUE_FULL"
	CodeWaitTimeout      Code = "WAIT_TIMEOUT"
	CodeDeployFailed     Code = "DEPLOY_FAILED"
	CodeStoreUnavailable Code = "STORE_UNAVAILABLE"
	CodeInternal         Code = "INTERNAL"

	// SPEC §11.5 additions.

	// CodeIdempotencyMismatch: the request id was used before for another request.
	CodeIdempotencyMismatch Code = "IDEMPOTENCY_MISMATCH"
	// CodePodNotFound: an agent report of a pod the pool does not have (unknown or
	// purged); the agent should exit.
	CodePodNotFound Code = "POD_NOT_FOUND"

	// SPEC §12.1 addition.

	// CodeTenantNotFound: a tenant without quotas that no scope names (GET), or
	// without quotas to delete (DELETE).
	CodeTenantNotFound Code = "TENANT_NOT_FOUND"
	// CodeQuotaExceeded: a route or acquire refused by a quota of the scope's tenant;
	// the error's Details say which (QuotaDetails).
	CodeQuotaExceeded Code = "QUOTA_EXCEEDED"
)

// Error is the domain error: a code of the contract, a message for the caller and,
// for the 503 codes, how many seconds the caller should wait before retrying.
type Error struct {
	Code       Code
	Message    string
	RetryAfter int
	// Details, when set, is the envelope's "details" (QUOTA_EXCEEDED: *QuotaDetails).
	Details any
}

// QuotaDetails say which quota refused a call (SPEC §12.1): the tenant, the quota's
// name (max_pods, max_cpu, max_memory, max_sessions), its limit and what the tenant's
// scopes hold of it: counts for pods and sessions, Kubernetes quantities for cpu and
// memory, as the tenant's config takes them.
type QuotaDetails struct {
	Tenant string `json:"tenant"`
	Quota  string `json:"quota"`
	Limit  any    `json:"limit"`
	Use    any    `json:"use"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Retry returns a copy of e that tells the caller to retry after the given seconds.
func (e *Error) Retry(seconds int) *Error {
	c := *e
	c.RetryAfter = seconds
	return &c
}

// ErrorCode returns the code of the first *Error in err's chain, or CodeInternal.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Infrastructure sentinels.
var (
	// ErrEpochLost: Redis lost its data (the epoch key is missing); requests fail
	// closed until reconcile rebuilds the pool.
	ErrEpochLost = &Error{Code: CodeStoreUnavailable, Message: "redis lost its data; rebuilding the pool", RetryAfter: 1}
	// ErrPodNotFound: a driver does not know the pod.
	ErrPodNotFound = errors.New("warmpool: pod not found")
	// ErrNotObtained: a lease lock is held by someone else.
	ErrNotObtained = errors.New("warmpool: lock not obtained")
	// ErrLockNotHeld: a lease is no longer the caller's (it expired, or another holder
	// has it now); the work done under it must commit nothing more.
	ErrLockNotHeld = errors.New("warmpool: lock not held")
)

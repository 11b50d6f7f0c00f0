package warmpool

import (
	"context"
	"time"
)

// StoredConfig is one version of a scope's config as the config store keeps it.
type StoredConfig struct {
	ScopeID   string      `json:"scope_id"`
	Version   int64       `json:"version"`
	DeployVer string      `json:"deploy_ver"`
	Config    ScopeConfig `json:"config"`
	UpdatedAt time.Time   `json:"updated_at"`
}

// The page sizes of a scope's history (SPEC §11.5): a caller that names no limit gets
// DefaultHistoryLimit versions, and none gets more than MaxHistoryLimit at once.
const (
	DefaultHistoryLimit = 50
	MaxHistoryLimit     = 500
)

// HistoryQuery picks a page of a scope's history, newest first. The store fills no
// default: the HTTP layer gives Limit DefaultHistoryLimit when the caller names none.
type HistoryQuery struct {
	// Before, when not 0, keeps the versions older than it: the NextBefore of the
	// page before.
	Before int64
	// Limit is the most versions of the page, 1 to MaxHistoryLimit.
	Limit int
}

// Check refuses a query out of range with VALIDATION naming the parameter.
func (q HistoryQuery) Check() error {
	if q.Limit < 1 || q.Limit > MaxHistoryLimit {
		return Errorf(CodeValidation, "limit: want 1 to %d, got %d", MaxHistoryLimit, q.Limit)
	}
	if q.Before < 0 {
		return Errorf(CodeValidation, "before: want a version (1 or more), got %d", q.Before)
	}
	return nil
}

// HistoryPage is one page of a scope's history.
type HistoryPage struct {
	// Versions are the page's versions, newest first; empty (not nil) past the oldest.
	Versions []StoredConfig
	// NextBefore is the Before of the next page when older versions remain, else 0.
	NextBefore int64
}

// ConfigStore keeps scope configs durably. Every Put is a new version; older versions
// stay as history, also when the scope is deleted. Configs go in normalized
// (ScopeConfig.Normalize) and come out normalized (LoadScopeConfig): a store fills no
// default of its own.
type ConfigStore interface {
	// Put stores cfg, which must be normalized, as the scope's next version.
	// Errors: STORE_UNAVAILABLE.
	Put(ctx context.Context, scopeID string, cfg ScopeConfig) (StoredConfig, error)
	// Get returns the latest version. Errors: SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
	Get(ctx context.Context, scopeID string) (StoredConfig, error)
	// List returns the latest version of every scope, ordered by scope id.
	// Errors: STORE_UNAVAILABLE.
	List(ctx context.Context) ([]StoredConfig, error)
	// History returns one page of a scope's versions, a deleted scope's too, newest
	// first: at most q.Limit versions older than q.Before, and NextBefore when older
	// ones remain. A page is one indexed query whatever the length of the history (a
	// page past the oldest version, which comes back empty, two). Errors: VALIDATION
	// (q out of range), SCOPE_NOT_FOUND (no version stored), STORE_UNAVAILABLE.
	History(ctx context.Context, scopeID string, q HistoryQuery) (HistoryPage, error)
	// Delete marks the scope deleted at its latest version, which it returns: Get and
	// List leave it out from then on, History keeps its versions, and the next Put
	// starts at the next version and makes it live again. Errors: SCOPE_NOT_FOUND
	// (unknown, or deleted already), STORE_UNAVAILABLE.
	Delete(ctx context.Context, scopeID string) (StoredConfig, error)
	// The store keeps tenants' quotas too (SPEC §12.1).
	TenantStore
	// Close releases the store.
	Close() error
}

// ConfigChange is one write of a scope's config: a Put of Version, or (Deleted) a
// Delete of the scope at Version. A change with TenantID set (and ScopeID empty) is
// a write of that tenant's quotas instead: a put, or (Deleted) a delete, at Version.
type ConfigChange struct {
	ScopeID  string
	TenantID string
	Version  int64
	Deleted  bool
}

// ConfigFeed is implemented by a ConfigStore that tells of the writes made to its
// database by any instance of the store (this replica's or another's): the sweeper
// publishes from it what a replica stored and then failed to publish, and keeps its
// per-scope facts and its tenants' quotas current, without reading every config.
type ConfigFeed interface {
	// Follow calls fn with the changes committed from the call on, in commit order,
	// until ctx ends, and then returns ctx.Err(). Only a scope's latest change is
	// kept: a scope (a tenant) written twice before its change is delivered comes
	// once, at its latest version. A batch fn fails (returns an error) comes again, later; so may
	// a change after the store's connection was lost. A store that does not answer
	// delays changes, and loses none: after a reconnect every change committed since
	// the last one delivered comes. fn is called from one goroutine at a time.
	Follow(ctx context.Context, fn func(ctx context.Context, changes []ConfigChange) error) error
}

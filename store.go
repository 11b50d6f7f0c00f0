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
	// History returns every version of a scope, oldest first, a deleted scope's too.
	// Errors: SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
	History(ctx context.Context, scopeID string) ([]StoredConfig, error)
	// Delete marks the scope deleted at its latest version, which it returns: Get and
	// List leave it out from then on, History keeps its versions, and the next Put
	// starts at the next version and makes it live again. Errors: SCOPE_NOT_FOUND
	// (unknown, or deleted already), STORE_UNAVAILABLE.
	Delete(ctx context.Context, scopeID string) (StoredConfig, error)
	// Close releases the store.
	Close() error
}

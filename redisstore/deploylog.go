package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// DeployLogLen is how many finished deploys a scope's deploy log keeps.
const DeployLogLen = 30

// DeployLogTTL is how long a scope's deploy log outlives its last deploy.
const DeployLogTTL = 7 * 24 * time.Hour

// DeployRecord is one finished deploy in a scope's deploy log.
type DeployRecord struct {
	// At is when the deploy ended.
	At time.Time `json:"at"`
	// Took is how long the driver's work took.
	Took time.Duration `json:"took"`
	// Result is "ok" or "failed".
	Result string `json:"result"`
}

// LogDeploy adds a finished deploy to the scope's deploy log, which keeps the latest
// DeployLogLen. The log is what an operator looks at (the pool page), not pool state:
// a lost entry changes no decision, so it is written without a script.
// Errors: STORE_UNAVAILABLE.
func (s *Store) LogDeploy(ctx context.Context, scope string, r DeployRecord) error {
	doc, err := json.Marshal(r)
	if err != nil {
		return err
	}
	key := s.keys.Scope(scope).DeployLog
	pipe := s.rdb.TxPipeline()
	pipe.LPush(ctx, key, doc)
	pipe.LTrim(ctx, key, 0, DeployLogLen-1)
	pipe.PExpire(ctx, key, DeployLogTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return s.redisErr(ctx, err)
	}
	return nil
}

// RecentDeploys returns the scope's deploy log, newest first. Errors:
// STORE_UNAVAILABLE.
func (s *Store) RecentDeploys(ctx context.Context, scope string) ([]DeployRecord, error) {
	raw, err := s.rdb.LRange(ctx, s.keys.Scope(scope).DeployLog, 0, -1).Result()
	if err != nil {
		return nil, s.redisErr(ctx, err)
	}
	out := make([]DeployRecord, 0, len(raw))
	for _, doc := range raw {
		var r DeployRecord
		if err := json.Unmarshal([]byte(doc), &r); err != nil {
			return nil, fmt.Errorf("scope %q: deploy log entry %q: %w", scope, doc, err)
		}
		out = append(out, r)
	}
	return out, nil
}

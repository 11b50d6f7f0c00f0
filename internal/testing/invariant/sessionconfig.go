package invariant

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool/redisstore"
)

// SessionConfigs lists the session configs of scope k that outlived what they belong
// to (SPEC §12.2: a config goes with its session or hold): an sconf field of a session
// that has no binding, or "hold|<id>" of a hold that is no claim. Empty when every
// config is of a live session or hold.
func SessionConfigs(ctx context.Context, rdb redis.Cmdable, k redisstore.ScopeKeys) ([]string, error) {
	fields, err := rdb.HKeys(ctx, k.SessConf).Result()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range fields {
		var live bool
		if hold, ok := strings.CutPrefix(f, "hold|"); ok {
			err = rdb.ZScore(ctx, k.Claims, hold).Err()
			live = err == nil
		} else {
			live, err = rdb.HExists(ctx, k.Sessions, f).Result()
		}
		if err != nil && err != redis.Nil {
			return nil, err
		}
		if !live {
			out = append(out, fmt.Sprintf("session config %q of %s outlived its session or hold", f, k.SessConf))
		}
	}
	return out, nil
}

package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Failover detection. A replica promoted to primary serves a history that may lack
// writes the old primary acknowledged: a session bound to a pod, a pod registered.
// The epoch keys survive the switch, so the scripts cannot see it; the replication ids
// do. A promoted replica takes a new id (INFO replication's master_replid) and keeps
// the old primary's as master_replid2. The keyspace records the id of the server it
// is built on (Keyspace.ReplicationID); a server whose master_replid2 is the recorded
// id was promoted from a replica of it: the keyspace is failed closed (every epoch
// deleted, so every script answers EPOCH_LOST) and reconcile rebuilds it
// (sweeper.Rebuild), holding the free slots of every pod until session_ttl_s has
// passed, since any of them may serve sessions the new primary lost. An id replaced
// without that link (a primary makes a new one when its first replica attaches) is
// only recorded again. Not detected: a restart from a snapshot or an AOF that missed
// its last writes, and a Cluster's failovers (each node has its own ids).

// replication reads the replication ids of the server c talks to. ok is false when the
// server does not tell them (an embedded Redis, a user without INFO).
func replication(ctx context.Context, c redis.Cmdable) (id, previous string, ok bool, err error) {
	info, err := c.Info(ctx, "replication").Result()
	var refused redis.Error
	if errors.As(err, &refused) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, err
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, found := strings.CutPrefix(line, "master_replid:"); found {
			id = v
		} else if v, found := strings.CutPrefix(line, "master_replid2:"); found {
			previous = v
		}
	}
	return id, previous, id != "", nil
}

// checkFailover deletes every epoch and reports true when the server was promoted from
// a replica of the one the keyspace was built on.
func checkFailover(ctx context.Context, c redis.Cmdable, k Keyspace) (bool, error) {
	_, previous, ok, err := replication(ctx, c)
	if err != nil || !ok {
		return false, err
	}
	built, err := c.Get(ctx, k.ReplicationID()).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, err
	case built != previous:
		return false, nil
	}
	scopes, err := c.SMembers(ctx, k.Scopes()).Result()
	if err != nil {
		return true, err
	}
	epochs := []string{k.Epoch()}
	for _, scope := range scopes {
		epochs = append(epochs, k.Scope(scope).Epoch)
	}
	for _, key := range epochs {
		if err := c.Del(ctx, key).Err(); err != nil {
			return true, err
		}
	}
	return true, nil
}

// CheckFailover fails the keyspace closed when Redis was promoted from a replica of
// the server the keyspace was built on, and reports whether it did (see above).
// Errors: STORE_UNAVAILABLE.
func (s *Store) CheckFailover(ctx context.Context) (bool, error) {
	if s.cluster() {
		return false, nil
	}
	found, err := checkFailover(ctx, s.rdb, s.keys)
	if err != nil {
		return found, s.redisErr(ctx, err)
	}
	return found, nil
}

// RecordReplicationID records the server's replication id as the one the keyspace is
// built on. Without force it leaves a record that names the server's previous id: a
// failover that CheckFailover has yet to handle. Errors: STORE_UNAVAILABLE.
func (s *Store) RecordReplicationID(ctx context.Context, force bool) error {
	if s.cluster() {
		return nil
	}
	id, previous, ok, err := replication(ctx, s.rdb)
	if err == nil && ok && !force && previous != "" {
		var built string
		built, err = s.rdb.Get(ctx, s.keys.ReplicationID()).Result()
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		if built == previous {
			ok = false
		}
	}
	if err == nil && ok {
		err = s.rdb.Set(ctx, s.keys.ReplicationID(), id, 0).Err()
	}
	if err != nil {
		return s.redisErr(ctx, err)
	}
	return nil
}

// FailoverCheck is a go-redis OnConnect hook that runs the failover check on every new
// connection, before its first command: after a failover, clients reconnect, and no
// request is admitted on the new history before the keyspace is failed closed. A
// failed check is logged and the connection kept (reconcile checks again).
func FailoverCheck(prefix string, log *slog.Logger) func(context.Context, *redis.Conn) error {
	k := NewKeyspace(prefix)
	return func(ctx context.Context, cn *redis.Conn) error {
		found, err := checkFailover(ctx, cn, k)
		if found {
			log.Warn("redis serves another replication history than the pool was built on (a failover, or a restart from disk): every scope is closed until reconcile rebuilds it")
		}
		if err != nil {
			log.Warn("failover check of a new redis connection failed; reconcile checks again", "err", err)
		}
		return nil
	}
}

package postgres

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/warmpool/warmpool"
)

// Feed timings.
const (
	// FeedCheck is how long the feed's listening connection may stay silent before it
	// is pinged: a connection that died without a word (a network cut) is found within
	// it, and replaced.
	FeedCheck = 30 * time.Second
	// FeedRetry is the wait before a reconnect, and before a batch the follower failed
	// comes again.
	FeedRetry = time.Second
	// feedApp is the application_name of the listening connection, for pg_stat_activity.
	feedApp = "warmpool-config-feed"
)

// feedChannel is the notification channel of the store in schema: notifications go
// to every listener of a database, and replicas of other deployments may share it in
// schemas of their own. A name past PostgreSQL's 63 bytes is hashed.
func feedChannel(schema string) string {
	name := "warmpool_config." + schema
	if len(name) > 63 {
		sum := sha256.Sum256([]byte(schema))
		name = "warmpool_config." + hex.EncodeToString(sum[:16])
	}
	return name
}

// recordChange numbers a write of the scope in tx as the next change of the feed, and
// notifies the listeners, which PostgreSQL tells at commit. The counter row stays
// locked until the commit, so numbers are taken in commit order.
func (s *Store) recordChange(ctx context.Context, tx *sql.Tx, scopeID string, version int64, deleted bool) error {
	if _, err := tx.ExecContext(ctx, `
		WITH n AS (UPDATE config_feed SET seq = seq + 1 RETURNING seq)
		INSERT INTO scope_changes (scope_id, seq, version, deleted) SELECT $1, n.seq, $2, $3 FROM n
		ON CONFLICT (scope_id) DO UPDATE SET seq = excluded.seq, version = excluded.version, deleted = excluded.deleted`,
		scopeID, version, deleted); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_notify($1, '')`, s.channel)
	return err
}

// Follow calls fn with the changes committed from the call on by any replica on the
// database (warmpool.ConfigFeed). A connection of its own LISTENs on the store's
// channel; each notification is a read of the changes numbered past the last one
// delivered. When that connection is lost it reconnects (every FeedRetry until it
// can), LISTENs again and then reads past the last one delivered: what was committed
// while no one listened comes then.
func (s *Store) Follow(ctx context.Context, fn func(context.Context, []warmpool.ConfigChange) error) error {
	seq, started := int64(0), false
	for {
		conn, err := s.listen(ctx)
		if err == nil && !started {
			seq, err = s.feed.Head(ctx)
			started = err == nil
		}
		if err == nil {
			s.follow(ctx, conn, &seq, fn)
		}
		if conn != nil {
			closing, cancel := context.WithTimeout(context.WithoutCancel(ctx), ConnectTimeout)
			_ = conn.Close(closing) // a connection being replaced: its error is of no use
			cancel()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(FeedRetry):
		}
	}
}

// listen opens the feed's connection and LISTENs on the store's channel. The
// connection is returned also with an error, to be closed.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.conn.Copy()
	cfg.RuntimeParams["application_name"] = feedApp
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if s.beforeListen != nil {
		s.beforeListen()
	}
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize())
	return conn, err
}

// follow delivers the changes past *seq, and again on each notification of conn, until
// conn fails or ctx ends. A delivery that failed is tried again after FeedRetry.
func (s *Store) follow(ctx context.Context, conn *pgx.Conn, seq *int64, fn func(context.Context, []warmpool.ConfigChange) error) {
	pending := true // the changes committed before LISTEN
	for {
		if pending {
			pending = s.feed.Deliver(ctx, seq, fn) != nil // fn logs its own errors
		}
		wait := FeedCheck
		if pending {
			wait = FeedRetry
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		_, err := conn.WaitForNotification(wctx)
		timedOut := wctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			pending = true
		case !timedOut:
			return // the connection is lost
		case !pending:
			if err := conn.Ping(ctx); err != nil {
				return
			}
		}
	}
}

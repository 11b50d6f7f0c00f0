package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/redisstore"
)

// Bounds of every Redis call of a replica: short, so that requests fail fast
// (STORE_UNAVAILABLE) while Redis is away.
const (
	redisDialTimeout = 2 * time.Second
	redisIOTimeout   = time.Second
	// redisBufferSize is each Redis connection's read and write buffer, pipeline
	// connections' included (unless the URL sets pipeline_*_buffer_size). go-redis
	// gives a connection 32 KiB each way and a pipeline connection 128 KiB, which
	// with its 20 + 10 connections was half a replica's live heap (3.8 of 7.3 MB),
	// and the GC's headroom doubles that in RSS once traffic comes; a replica's
	// commands and replies are a few hundred bytes (a route's EVALSHA), and a
	// larger reply or pipeline only takes more reads or writes of the socket.
	redisBufferSize = 8 << 10
)

// RedisHelp says what --redis takes; `serve -h` and the README show it.
const RedisHelp = "redis://[user:pass@]host:port[/db] for one server (rediss:// with TLS); " +
	"redis+cluster://[user:pass@]host:port,host:port,… for a Cluster (rediss+cluster:// with TLS); " +
	"or host:port,host:port,… for a Cluster without auth or TLS. " +
	"URL query options of go-redis apply (e.g. ?pool_size=50)"

// NewRedis connects to the Redis that spec names (see RedisHelp). caFile, when set, is
// a PEM bundle of the certificate authorities that sign the server's TLS certificate
// (otherwise the system's roots are used); it needs a TLS URL. Passwords never appear
// in the errors.
func NewRedis(spec, caFile string) (redis.UniversalClient, error) {
	single, cluster, err := parseRedis(spec)
	if err != nil {
		return nil, fmt.Errorf("--redis %s: %w", redactURL(spec), err)
	}
	var tc *tls.Config
	if single != nil {
		tc = single.TLSConfig
	} else {
		tc = cluster.TLSConfig
	}
	if caFile != "" {
		if tc == nil {
			return nil, fmt.Errorf("--redis-ca %s: needs a TLS URL (rediss:// or rediss+cluster://)", caFile)
		}
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--redis-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--redis-ca %s: no PEM certificate in it", caFile)
		}
		tc.RootCAs = pool
	}
	if tc != nil {
		tc.MinVersion = max(tc.MinVersion, tls.VersionTLS12)
	}
	if cluster != nil {
		cluster.DialTimeout, cluster.ReadTimeout, cluster.WriteTimeout, cluster.PoolTimeout = redisDialTimeout, redisIOTimeout, redisIOTimeout, redisDialTimeout
		cluster.MaxRetries, cluster.DialerRetries = 1, 1
		cluster.ReadBufferSize, cluster.WriteBufferSize = redisBufferSize, redisBufferSize
		defaults.Positive(&cluster.PipelineReadBufferSize, redisBufferSize)
		defaults.Positive(&cluster.PipelineWriteBufferSize, redisBufferSize)
		return redis.NewClusterClient(cluster), nil
	}
	single.DialTimeout, single.ReadTimeout, single.WriteTimeout, single.PoolTimeout = redisDialTimeout, redisIOTimeout, redisIOTimeout, redisDialTimeout
	single.MaxRetries, single.DialerRetries = 1, 1
	single.ReadBufferSize, single.WriteBufferSize = redisBufferSize, redisBufferSize
	defaults.Positive(&single.PipelineReadBufferSize, redisBufferSize)
	defaults.Positive(&single.PipelineWriteBufferSize, redisBufferSize)
	return redis.NewClient(single), nil
}

// parseRedis reads a --redis value (see RedisHelp) into the options of one server or
// of a Cluster.
func parseRedis(spec string) (*redis.Options, *redis.ClusterOptions, error) {
	scheme, _, isURL := strings.Cut(spec, "://")
	switch {
	case spec == "":
		return nil, nil, errors.New("empty")
	case scheme == "redis+cluster" || scheme == "rediss+cluster":
		u, err := clusterURL(spec)
		if err != nil {
			return nil, nil, err
		}
		o, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, nil, unwrapURLError(err)
		}
		return nil, o, nil
	case isURL:
		o, err := redis.ParseURL(spec)
		if err != nil {
			return nil, nil, unwrapURLError(err)
		}
		return o, nil, nil
	}
	addrs := strings.Split(spec, ",")
	for i, a := range addrs {
		addrs[i] = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(addrs[i]); err != nil {
			return nil, nil, errors.New("want a redis:// or redis+cluster:// URL, or host:port,host:port,… for a Cluster")
		}
	}
	if len(addrs) == 1 {
		return &redis.Options{Addr: addrs[0]}, nil, nil
	}
	return nil, &redis.ClusterOptions{Addrs: addrs}, nil
}

// clusterURL turns redis+cluster://[user:pass@]h1:p1,h2:p2[/0][?opts] into the form
// go-redis parses: redis://[user:pass@]h1:p1?addr=h2:p2&opts (rediss for TLS).
func clusterURL(spec string) (string, error) {
	scheme, rest, _ := strings.Cut(spec, "://")
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	hostsPart, tail := rest[:end], rest[end:]
	user := ""
	if i := strings.LastIndex(hostsPart, "@"); i >= 0 {
		user, hostsPart = hostsPart[:i+1], hostsPart[i+1:]
	}
	hosts := strings.Split(hostsPart, ",")
	for _, h := range hosts {
		if _, _, err := net.SplitHostPort(h); err != nil {
			return "", fmt.Errorf("cluster node %q: want host:port", h)
		}
	}
	u, err := url.Parse(strings.TrimSuffix(scheme, "+cluster") + "://" + user + hosts[0] + tail)
	if err != nil {
		return "", unwrapURLError(err)
	}
	if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
		return "", fmt.Errorf("database %s: a Redis Cluster has only database 0", db)
	}
	u.Path = ""
	q := u.Query()
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// unwrapURLError drops the URL that url.Parse puts in its errors: it may hold a
// password.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redactURL hides the password of a Redis URL (or list) for messages.
func redactURL(spec string) string {
	scheme, rest, ok := strings.Cut(spec, "://")
	if !ok {
		return spec
	}
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return spec
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return spec
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// refusedByRedis pings Redis once and returns what waiting will not mend: Redis
// refused the credentials (or the user's rights), or its TLS certificate is not
// trusted. An unreachable Redis is no error here: the replica waits for it.
func refusedByRedis(ctx context.Context, rdb redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, redisDialTimeout)
	defer cancel()
	err := rdb.Ping(ctx).Err()
	var cert *tls.CertificateVerificationError
	if errors.As(err, &cert) {
		return fmt.Errorf("redis: TLS: %w (--redis-ca names the CA that signs it)", err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		for _, refusal := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
			if strings.HasPrefix(rerr.Error(), refusal) {
				return fmt.Errorf("redis refused the credentials of --redis: %w", err)
			}
		}
	}
	return nil
}

// awaitRedis waits until Redis answers (a replica may start before its Redis), then
// refuses a Redis older than warmpool needs (redisstore.CheckVersion: the error names the
// version found and the one needed) and measures the replica's clock against it.
func (s *Server) awaitRedis(ctx context.Context) error {
	for {
		found, err := s.store.CheckVersion(ctx)
		if warmpool.ErrorCode(err) == warmpool.CodeStoreUnavailable {
			if err := s.waitForRedis(ctx, err); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if found == "" && s.mini == nil {
			s.log.Warn("redis does not tell its version (INFO server): warmpool needs " + redisstore.MinRedisVersion + " or later, " + redisstore.MinClusterVersion + " on a Cluster")
		}
		s.measureClock(ctx)
		return nil
	}
}

// waitForRedis logs that Redis did not answer (err) and waits a second for it, or
// until ctx ends: a replica started before its Redis waits for it.
func (s *Server) waitForRedis(ctx context.Context, err error) error {
	s.log.Warn("waiting for redis", "err", err)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Second):
		return nil
	}
}

// Clock skew: measured every ClockCheckInterval; above MaxClockSkew it is logged as a
// warning (docs/operations.md says what it costs).
const (
	ClockCheckInterval = time.Minute
	MaxClockSkew       = 100 * time.Millisecond
)

// measureClock measures the skew of the replica's clock against Redis's TIME, which
// the store takes off the guarded calls' deadlines from then on, exports it
// (warmpool_clock_skew_seconds) and warns when it is above MaxClockSkew. A failed
// measurement keeps the last one.
func (s *Server) measureClock(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, redisDialTimeout)
	defer cancel()
	m, err := s.store.MeasureClockSkew(ctx)
	if err != nil {
		s.log.Warn("clock skew against redis not measured; the last measurement stands", "err", err)
		return
	}
	s.metrics.ObserveClockSkew(m.Skew)
	if m.Skew.Abs() > MaxClockSkew {
		s.log.Warn("the replica's clock differs from Redis's by more than "+MaxClockSkew.String()+
			": guarded calls are sent in Redis's time, but session, lease and idle times written by replicas whose clocks differ are off by as much (docs/operations.md)",
			"skew", m.Skew.Round(time.Millisecond), "rtt", m.RTT.Round(time.Microsecond))
	}
}

package server

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// --redis forms: one server, a Cluster by URL with credentials and TLS, a bare list.
func TestParseRedis(t *testing.T) {
	for _, c := range []struct {
		spec        string
		cluster     bool
		addrs       []string
		user, pass  string
		db          int
		tls         bool
		serverName  string
		poolSize    int
		errContains string
	}{
		{spec: "redis://127.0.0.1:6379/2", addrs: []string{"127.0.0.1:6379"}, db: 2},
		{spec: "redis://alice:s3cret@redis.internal:6380/0", addrs: []string{"redis.internal:6380"}, user: "alice", pass: "s3cret"},
		{spec: "rediss://:pw@redis.internal:6380", addrs: []string{"redis.internal:6380"}, pass: "pw", tls: true, serverName: "redis.internal"},
		{spec: "127.0.0.1:7000", addrs: []string{"127.0.0.1:7000"}},
		{spec: "h1:7000, h2:7001", cluster: true, addrs: []string{"h1:7000", "h2:7001"}},
		{spec: "redis+cluster://u:p%40ss@h1:7000,h2:7001,[::1]:7002", cluster: true, addrs: []string{"h1:7000", "h2:7001", "[::1]:7002"}, user: "u", pass: "p@ss"},
		{spec: "rediss+cluster://u:p@h1:7000,h2:7001/0?pool_size=5", cluster: true, addrs: []string{"h1:7000", "h2:7001"}, user: "u", pass: "p", tls: true, serverName: "h1", poolSize: 5},
		{spec: "redis+cluster://h1:7000", cluster: true, addrs: []string{"h1:7000"}},
		{spec: "redis+cluster://u:topsecret@h1:7000/3", errContains: "only database 0"},
		{spec: "redis+cluster://u:topsecret@h1,h2:7001", errContains: "host:port"},
		{spec: "redis://u:topsecret@h:1/x", errContains: "database"},
		{spec: "rediss://u:topsecret@h:1/0?addr=h2:2", errContains: "unexpected option"},
		{spec: "ftp://u:topsecret@h:1", errContains: "scheme"},
		{spec: "redis-host", errContains: "want a redis://"},
		{spec: "", errContains: "empty"},
	} {
		single, cluster, err := parseRedis(c.spec)
		if c.errContains != "" {
			if err == nil || !strings.Contains(err.Error(), c.errContains) {
				t.Errorf("%q: error %v, want one saying %q", c.spec, err, c.errContains)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.spec, err)
			continue
		}
		if (cluster != nil) != c.cluster {
			t.Errorf("%q: cluster %v, want %v", c.spec, cluster != nil, c.cluster)
			continue
		}
		var addrs []string
		var user, pass string
		var db, poolSize int
		var tlsOn bool
		var serverName string
		if cluster != nil {
			addrs, user, pass, poolSize = cluster.Addrs, cluster.Username, cluster.Password, cluster.PoolSize
			if tlsOn = cluster.TLSConfig != nil; tlsOn {
				serverName = cluster.TLSConfig.ServerName
			}
		} else {
			addrs, user, pass, db, poolSize = []string{single.Addr}, single.Username, single.Password, single.DB, single.PoolSize
			if tlsOn = single.TLSConfig != nil; tlsOn {
				serverName = single.TLSConfig.ServerName
			}
		}
		if strings.Join(addrs, " ") != strings.Join(c.addrs, " ") || user != c.user || pass != c.pass || db != c.db ||
			tlsOn != c.tls || serverName != c.serverName || poolSize != c.poolSize {
			t.Errorf("%q: addrs %v user %q pass %q db %d tls %v (%q) pool %d; want %v %q %q %d %v (%q) %d", c.spec,
				addrs, user, pass, db, tlsOn, serverName, poolSize, c.addrs, c.user, c.pass, c.db, c.tls, c.serverName, c.poolSize)
		}
	}
}

// Errors about --redis never show the password.
func TestNewRedisHidesPasswords(t *testing.T) {
	for _, spec := range []string{
		"redis+cluster://u:topsecret@h1:7000/3",
		"redis://u:topsecret@h:1/x",
		"ftp://u:topsecret@h:1",
		"redis://u:topsecret@h:1/0?bogus=1",
		"rediss://u:topsecret@h:[1/0",
	} {
		_, err := NewRedis(spec, "")
		if err == nil || strings.Contains(err.Error(), "topsecret") || !strings.Contains(err.Error(), "xxxxx") {
			t.Errorf("%q: error %v: want one with the password hidden", spec, err)
		}
	}
	if _, err := NewRedis("redis://h:1/0", "/some/ca.pem"); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("--redis-ca with a plain URL: %v, want an error asking for TLS", err)
	}
}

// Every connection NewRedis makes gets redisBufferSize buffers, a pipeline's too,
// unless the URL sizes the pipeline's (go-redis: 32 KiB, and 128 KiB for pipelines).
func TestRedisBuffers(t *testing.T) {
	for _, c := range []struct {
		spec string
		pipe int
	}{
		{"redis://h:1/0", redisBufferSize},
		{"redis://h:1/0?pipeline_read_buffer_size=65536&pipeline_write_buffer_size=65536", 65536},
		{"redis+cluster://h1:1,h2:2", redisBufferSize},
	} {
		rdb, err := NewRedis(c.spec, "")
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		var got [4]int
		switch r := rdb.(type) {
		case *redis.Client:
			o := r.Options()
			got = [4]int{o.ReadBufferSize, o.WriteBufferSize, o.PipelineReadBufferSize, o.PipelineWriteBufferSize}
		case *redis.ClusterClient:
			o := r.Options()
			got = [4]int{o.ReadBufferSize, o.WriteBufferSize, o.PipelineReadBufferSize, o.PipelineWriteBufferSize}
		}
		_ = rdb.Close()
		if want := [4]int{redisBufferSize, redisBufferSize, c.pipe, c.pipe}; got != want {
			t.Errorf("%s: buffers read, write, pipeline read, pipeline write %v, want %v", c.spec, got, want)
		}
	}
}

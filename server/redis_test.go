package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/server"
)

func withRedisCA(path string) envOption {
	return func(c *server.Config) { c.RedisCA = path }
}

// redisServer starts a redis-server of its own with the args of a port and a spare
// port (for a cluster bus) and returns the port; it is killed with the test. Both
// ports were free a moment ago only, and Redis listens on its port before it binds its
// cluster bus: a server that exits before it answers is started again on other ports.
// Without redis-server the test is skipped, unless the suite runs on a real Redis
// (make test), where that is an error.
func redisServer(t *testing.T, args func(port, spare int) []string) int {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if testredis.Real() {
			t.Fatal("redis-server is missing (Debian: apt-get install redis-server)")
		}
		t.Skip("redis-server is missing")
	}
	for range 5 {
		port, spare := freePort(t), freePort(t)
		a := args(port, spare)
		if startRedis(t, port, slices.Contains(a, "--tls-port"), a) {
			return port
		}
	}
	t.Fatal("redis-server did not start on 5 pairs of free ports")
	return 0
}

// startRedis starts redis-server with args and reports whether its event loop answers
// on port (a reply to PING, NOAUTH too; over TLS when tls); a server that did not
// start is gone when it returns false.
func startRedis(t *testing.T, port int, tls bool, args []string) bool {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("redis-server", append([]string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}, args...)...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	kill := func() { _ = cmd.Process.Kill(); <-done }
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return false
		default:
		}
		if answers("127.0.0.1:"+strconv.Itoa(port), tls) {
			t.Cleanup(kill)
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	kill()
	return false
}

// answers reports whether a Redis at addr replies to PING: the kernel accepts
// connections once the port listens, the reply comes only from a server that runs.
func answers(addr string, useTLS bool) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if useTLS {
		conn = tls.Client(conn, &tls.Config{InsecureSkipVerify: true})
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	b := make([]byte, 1)
	_, err = conn.Read(b)
	return err == nil && (b[0] == '+' || b[0] == '-')
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ping checks a client made by server.NewRedis.
func ping(spec, ca string) error {
	rdb, err := server.NewRedis(spec, ca)
	if err != nil {
		return err
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rdb.Ping(ctx).Err()
}

// servesThrough builds a replica on the Redis of url and routes a session through it.
func servesThrough(t *testing.T, url string, opts ...envOption) {
	t.Helper()
	e := mustEnv(t, append([]envOption{withRedisURL(url, "auth:")}, opts...)...)
	e.ok("GET", "/readyz", nil)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	e.route("ok", "s1")
}

// A Redis with a password and an ACL user: the replica works with the user's or the
// default user's credentials, and a wrong or missing password is refused.
func TestRedisPasswordAndACLUser(t *testing.T) {
	t.Parallel()
	port := redisServer(t, func(port, _ int) []string {
		return []string{"--port", strconv.Itoa(port), "--requirepass", "default-pw",
			"--user", "warmpool", "on", ">user-pw", "~*", "&*", "+@all"}
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for _, c := range []struct {
		url  string
		want string // "" = works
	}{
		{"redis://warmpool:user-pw@" + addr + "/0", ""},
		{"redis://:default-pw@" + addr, ""},
		{"redis://warmpool:wrong@" + addr, "WRONGPASS"},
		{"redis://" + addr, "NOAUTH"},
	} {
		err := ping(c.url, "")
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.url, err, c.want)
		}
	}
	servesThrough(t, "redis://warmpool:user-pw@"+addr+"/0")
	refusedAtStart(t, server.Config{RedisURL: "redis://warmpool:wrong@" + addr}, "WRONGPASS")
}

// refusedAtStart requires server.New to fail at once, naming why, rather than wait for
// a Redis that will never let it in.
func refusedAtStart(t *testing.T, cfg server.Config, want string) {
	t.Helper()
	cfg.StorePath, cfg.Driver = ":memory:", fake.New()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv, err := server.New(ctx, cfg)
	if err == nil {
		_ = srv.Close()
		t.Fatalf("%s: started", cfg.RedisURL)
	}
	if ctx.Err() != nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: %v, want a prompt error saying %q", cfg.RedisURL, err, want)
	}
}

// A Redis that speaks TLS only (a certificate of a private CA) and wants a password:
// rediss:// with --redis-ca works; without the CA or without TLS it does not.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	pki := newPKI(t)
	port := redisServer(t, func(port, _ int) []string {
		return append(pki.serverArgs(), "--port", "0", "--tls-port", strconv.Itoa(port), "--requirepass", "pw")
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if err := ping("rediss://:pw@"+addr, pki.ca); err != nil {
		t.Fatalf("rediss:// with the CA: %v", err)
	}
	if err := ping("rediss://:pw@"+addr, ""); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("rediss:// without the CA: %v, want a certificate error", err)
	}
	if err := ping("redis://:pw@"+addr, ""); err == nil {
		t.Fatal("redis:// to a TLS port answered")
	}
	servesThrough(t, "rediss://:pw@"+addr+"/0", withRedisCA(pki.ca))
	refusedAtStart(t, server.Config{RedisURL: "rediss://:pw@" + addr}, "certificate")
}

// A Redis Cluster (one node holding every slot) over TLS with an ACL user, named by a
// rediss+cluster:// URL: the replica runs its scripts on it.
func TestRedisClusterTLSAndACL(t *testing.T) {
	t.Parallel()
	pki := newPKI(t)
	port := redisServer(t, func(port, bus int) []string {
		return append(pki.serverArgs(), "--port", "0", "--tls-port", strconv.Itoa(port), "--tls-cluster", "yes",
			"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus), "--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"),
			"--requirepass", "default-pw", "--user", "warmpool", "on", ">user-pw", "~*", "&*", "+@all")
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)

	admin := redis.NewClient(&redis.Options{Addr: addr, Password: "default-pw", TLSConfig: pki.clientTLS()})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.ClusterAddSlotsRange(ctx, 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "the cluster is ok", func() bool {
		info, err := admin.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	url := "rediss+cluster://warmpool:user-pw@" + addr
	rdb, err := server.NewRedis(url, pki.ca)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("%s: a %T, want a cluster client", url, rdb)
	}
	rdb.Close()
	servesThrough(t, url, withRedisCA(pki.ca))
}

// pki is a private CA and a server certificate for 127.0.0.1 signed by it, as files.
type pki struct {
	ca, cert, key string
	pool          *x509.CertPool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "warmpool test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "redis"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{ca: filepath.Join(dir, "ca.pem"), cert: filepath.Join(dir, "cert.pem"), key: filepath.Join(dir, "key.pem"), pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	for path, block := range map[string]*pem.Block{
		p.ca:   {Type: "CERTIFICATE", Bytes: caDER},
		p.cert: {Type: "CERTIFICATE", Bytes: der},
		p.key:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// serverArgs are redis-server's TLS settings: its certificate, no client certificates.
func (p *pki) serverArgs() []string {
	return []string{"--tls-cert-file", p.cert, "--tls-key-file", p.key, "--tls-ca-cert-file", p.ca, "--tls-auth-clients", "no"}
}

func (p *pki) clientTLS() *tls.Config {
	return &tls.Config{RootCAs: p.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// A Redis older than warmpool's commands need stops the start at once, with one line
// naming the version found and the one needed, instead of failing calls later.
func TestRedisTooOld(t *testing.T) {
	t.Parallel()
	refusedAtStart(t, server.Config{RedisURL: "redis://" + testredis.OldServer(t, "6.0.9")}, "is version 6.0.9: warmpool needs 6.2 or later")
}

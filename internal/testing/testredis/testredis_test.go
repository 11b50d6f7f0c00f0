package testredis

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

func TestSlot(t *testing.T) {
	// Test vectors from the Redis Cluster specification.
	if got := crc16([]byte("123456789")); got != 0x31C3 {
		t.Fatalf("crc16 = %#x, want 0x31c3", got)
	}
	cases := map[string]int{
		"foo":           12182,
		"{user1000}.a":  Slot("user1000"),
		"p:{demo}:pods": Slot("demo"),
		"a{}b":          Slot("a{}b"), // an empty tag hashes the whole key
	}
	for k, want := range cases {
		if got := Slot(k); got != want {
			t.Errorf("Slot(%q) = %d, want %d", k, got, want)
		}
	}
	if Slot("p:{a}:x") == Slot("p:{b}:x") {
		t.Fatal("different tags should (for these two) land in different slots")
	}
}

// recorder is a testing.TB that records errors instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) { r.errs = append(r.errs, format) }

func TestSlotHookCatchesCrossSlotScripts(t *testing.T) {
	mini := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	defer c.Close()
	rec := &recorder{TB: t}
	c.AddHook(SlotHook(rec))
	ctx := t.Context()
	c.Eval(ctx, "return 1", []string{"p:{a}:x", "p:{a}:y"})
	if len(rec.errs) != 0 {
		t.Fatalf("same-slot keys reported: %v", rec.errs)
	}
	c.Eval(ctx, "return 1", []string{"p:{a}:x", "p:{b}:y"})
	if len(rec.errs) != 1 {
		t.Fatalf("cross-slot keys not reported (errors %v)", rec.errs)
	}
}

// The README's ACL line, run for another --prefix, gives that prefix's keys and none of
// wp:'s.
func TestPrefixUser(t *testing.T) {
	if os.Getenv("REDIS_ADDR") == "" {
		t.Skip("needs a real Redis: REDIS_ADDR")
	}
	opts, err := redis.ParseURL(PrefixUserURL(t, "other:"))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx := context.Background()
	key := "other:t" + warmpool.NewID()[:12]
	if err := c.Set(ctx, key, "v", time.Minute).Err(); err != nil {
		t.Fatalf("SET %s as %s: %v", key, opts.Username, err)
	}
	if err := c.Set(ctx, "wp:"+key, "v", time.Minute).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("SET wp:%s as %s: %v, want NOPERM", key, opts.Username, err)
	}
	admin := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer admin.Close()
	admin.Del(ctx, key)
}

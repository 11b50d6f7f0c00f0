package testredis

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
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

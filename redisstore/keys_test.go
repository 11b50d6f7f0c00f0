package redisstore

import (
	"reflect"
	"strings"
	"testing"
)

// TestScopeKeys checks that every key of a scope is the prefix, the scope's hash tag
// and a name of its own, that the fixed order names every key once and ScopeKeys.key
// gives each field its name, and that the keys cost two allocations: their common part
// and the one string Scope cuts them from.
func TestScopeKeys(t *testing.T) {
	k := NewKeyspace("p:").Scope("s1")
	v := reflect.ValueOf(k)
	seen := map[string]string{}
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() || f.Name == "ID" {
			continue
		}
		key := v.Field(i).String()
		name, ok := strings.CutPrefix(key, "p:{s1}:")
		if !ok || name == "" || strings.ContainsAny(name, "{}:") {
			t.Errorf("%s = %q, want p:{s1}:<name>", f.Name, key)
		}
		if other, dup := seen[key]; dup {
			t.Errorf("%s and %s are both %q", other, f.Name, key)
		}
		seen[key] = f.Name
	}
	if len(seen) != int(numScopeKeys) {
		t.Errorf("ScopeKeys has %d keys, the fixed order %d", len(seen), numScopeKeys)
	}
	for n := range numScopeKeys {
		want := "p:{s1}:" + n.name()
		if got := k.key(n); got != want {
			t.Errorf("key %d (%s) = %q, want %q", n, n.name(), got, want)
		}
		if _, ok := seen[want]; !ok {
			t.Errorf("no field of ScopeKeys is %q", want)
		}
	}
	ks := NewKeyspace("wp:")
	if n := testing.AllocsPerRun(100, func() { ks.Scope("a-scope") }); n > 2 {
		t.Errorf("Scope makes %.0f allocations, want 2", n)
	}
}

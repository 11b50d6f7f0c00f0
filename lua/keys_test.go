package lua

import (
	"reflect"
	"strings"
	"testing"
)

// TestScopeKeys checks that every key of a scope is the prefix, the scope's hash tag
// and a name of its own, that Scope makes room for every key in the one string it
// cuts them from (scopeKeyCount, scopeKeySuffixes), and that the keys cost two
// allocations: their common part and that string.
func TestScopeKeys(t *testing.T) {
	k := NewKeyspace("p:").Scope("s1")
	v := reflect.ValueOf(k)
	seen := map[string]string{}
	suffixes := 0
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
		suffixes += len(name)
	}
	if len(seen) != scopeKeyCount || suffixes != scopeKeySuffixes {
		t.Errorf("Scope makes %d keys with names of %d bytes together; scopeKeyCount and scopeKeySuffixes say %d and %d",
			len(seen), suffixes, scopeKeyCount, scopeKeySuffixes)
	}
	ks := NewKeyspace("wp:")
	if n := testing.AllocsPerRun(100, func() { ks.Scope("a-scope") }); n > 2 {
		t.Errorf("Scope makes %.0f allocations, want 2", n)
	}
}

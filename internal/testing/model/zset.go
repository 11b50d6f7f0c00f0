package model

import (
	"cmp"
	"slices"
)

// zset is a Redis sorted set: member -> score. Every score the scripts write is a whole
// number of milliseconds (or an arrival number), so int64 holds it exactly.
type zset map[string]int64

// asc lists the members as ZRANGE does: by score, ties by member.
func (z zset) asc() []string {
	out := make([]string, 0, len(z))
	for m := range z {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b string) int {
		if c := cmp.Compare(z[a], z[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return out
}

// desc lists the members as ZREVRANGE does: the reverse of asc.
func (z zset) desc() []string {
	out := z.asc()
	slices.Reverse(out)
	return out
}

// upTo lists the members scored at most max, as ZRANGEBYSCORE -inf max does.
func (z zset) upTo(max int64) []string {
	var out []string
	for _, m := range z.asc() {
		if z[m] <= max {
			out = append(out, m)
		}
	}
	return out
}

// first is the lowest member, "" when the set is empty.
func (z zset) first() string {
	if all := z.asc(); len(all) > 0 {
		return all[0]
	}
	return ""
}

// rank is the member's 0-based place in asc.
func (z zset) rank(m string) int {
	return slices.Index(z.asc(), m)
}

package redisstore

import "time"

// SetWallClock makes s read the replica's wall clock from now (a clock that runs
// behind or ahead of Redis's).
func SetWallClock(s *Store, now func() time.Time) { s.wall = now }

// OlderVersion is olderVersion.
var OlderVersion = olderVersion

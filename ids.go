package warmpool

// The id patterns, checked byte by byte (a regexp match cost more than the rest of a
// warm route's validation): every byte of an id is in its set, and for scope and pod
// ids the first and last bytes are in lowerAlnum.
var (
	lowerAlnum = byteSet("abcdefghijklmnopqrstuvwxyz0123456789")
	// ^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$
	scopeIDBytes = byteSet("abcdefghijklmnopqrstuvwxyz0123456789._-")
	// ^[A-Za-z0-9._:-]{1,128}$
	sessionIDBytes = byteSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-")
	// Pod ids are names we give (DNS-1123 subdomain-ish) or that a cluster gave:
	// ^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$
	podIDBytes = byteSet("abcdefghijklmnopqrstuvwxyz0123456789.-")
	// Request ids and idempotency keys, printable, no spaces, bounded:
	// ^[A-Za-z0-9._:/+=-]{1,128}$
	requestIDBytes = byteSet("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:/+=-")
)

// byteSet is the set of the bytes of s.
func byteSet(s string) *[256]bool {
	var set [256]bool
	for i := range len(s) {
		set[s[i]] = true
	}
	return &set
}

// validID reports whether id has 1 to maxLen bytes, each in set, and its first and
// last bytes in ends (nil: no other rule for them).
func validID(id string, maxLen int, set, ends *[256]bool) bool {
	if len(id) == 0 || len(id) > maxLen || ends != nil && (!ends[id[0]] || !ends[id[len(id)-1]]) {
		return false
	}
	for i := range len(id) {
		if !set[id[i]] {
			return false
		}
	}
	return true
}

// ValidScopeID reports whether id matches the scope id pattern of SPEC §1.
func ValidScopeID(id string) bool { return validID(id, 63, scopeIDBytes, lowerAlnum) }

// MaxSessionIDLen is the longest session id (SPEC §1).
const MaxSessionIDLen = 128

// ValidSessionID reports whether id matches the session id pattern of SPEC §1.
func ValidSessionID(id string) bool { return validID(id, MaxSessionIDLen, sessionIDBytes, nil) }

// ValidPodID reports whether id can be a pod id.
func ValidPodID(id string) bool { return validID(id, 253, podIDBytes, lowerAlnum) }

// ValidRequestID reports whether id can be a request id / idempotency key.
func ValidRequestID(id string) bool { return validID(id, 128, requestIDBytes, nil) }

// CheckScopeID returns a VALIDATION error unless id is a valid scope id.
func CheckScopeID(id string) error {
	if !ValidScopeID(id) {
		return Errorf(CodeValidation, "scope_id: must match ^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
	}
	return nil
}

// CheckSessionID returns a VALIDATION error unless id is a valid session id.
func CheckSessionID(id string) error {
	if !ValidSessionID(id) {
		return Errorf(CodeValidation, "session_id: must be 1-128 chars of [A-Za-z0-9._:-]")
	}
	return nil
}

// CheckRequestID returns a VALIDATION error unless id is empty or a valid request id.
func CheckRequestID(id string) error {
	if id != "" && !ValidRequestID(id) {
		return Errorf(CodeValidation, "request_id: must be 1-128 chars of [A-Za-z0-9._:/+=-]")
	}
	return nil
}

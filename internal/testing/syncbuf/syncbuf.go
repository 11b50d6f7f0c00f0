// Package syncbuf is a bytes.Buffer that concurrent writers (a logger, a child
// process's output) and readers share: what tests read back of what was logged.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent Write and String; the zero value is empty and ready.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

package testenv

import (
	"strings"
	"sync"
)

// Buffer collects output (logs, stderr) written from several goroutines while a test
// reads it.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (w *Buffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// String returns everything written so far.
func (w *Buffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

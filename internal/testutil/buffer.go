package testutil

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that goroutines may write while a test reads
// it: a log destination for nodes, the output of a child process.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

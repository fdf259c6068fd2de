package main

import (
	"bufio"
	"io"
	"os"
	"sync"
)

// stdio imitates C's stdout, which rping writes with printf: line-buffered
// on a terminal, fully buffered (one st_blksize block) on a pipe or file,
// and flushed by exit(). The order in which stdout and stderr lines reach a
// shared file (rping ... >log 2>&1) is therefore the same as rdma-core's:
// the unbuffered stderr lines first, the ping lines when the buffer fills
// or the process exits.
type stdio struct {
	mu   sync.Mutex
	w    *bufio.Writer
	line bool // flush at every newline (a terminal)
}

func newStdio(w io.Writer) *stdio {
	size, line := 4096, false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil {
			if fi.Mode()&os.ModeCharDevice != 0 {
				line = true // a terminal (or /dev/null, which does not care)
			}
			if n := blockSize(fi); n > 0 {
				size = n
			}
		}
	}
	return &stdio{w: bufio.NewWriterSize(w, size), line: line}
}

// Write is one printf.
func (s *stdio) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.w.Write(p)
	if s.line && err == nil {
		err = s.w.Flush()
	}
	return n, err
}

// Flush writes out the buffer, as exit() does.
func (s *stdio) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Flush()
}

// lockedWriter serialises writes of concurrent goroutines to stderr, which
// stays unbuffered as in C.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

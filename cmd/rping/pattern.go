package main

import (
	"bytes"
	"strconv"
)

// Ping data characters run from 'A' to 'z' and wrap.
const (
	patternFirst = 'A' // 65
	patternLast  = 'z' // 122
)

// fillPattern writes iteration i's ping data into buf, as rping's client
// does before each iteration: snprintf of "rdma-ping-<i>: " (truncated,
// NUL-terminated, if buf is too short), then characters counting up from
// a start character and wrapping from 'z' to 'A', the start being 'A' for
// iteration 0 and one further for each iteration; the last byte is 0.
func fillPattern(buf []byte, i int) {
	if len(buf) == 0 {
		return
	}
	prefix := "rdma-ping-" + strconv.Itoa(i) + ": "
	n := copy(buf[:len(buf)-1], prefix)
	buf[n] = 0 // snprintf's terminator; overwritten below if there is room
	c := byte(patternFirst + i%(patternLast-patternFirst+1))
	for j := len(prefix); j < len(buf); j++ {
		buf[j] = c
		if c++; c > patternLast {
			c = patternFirst
		}
	}
	buf[len(buf)-1] = 0
}

// cString is buf up to its first NUL, as printf("%s") shows it (the whole
// buffer if there is none: C would read on past its end).
func cString(buf []byte) []byte {
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		return buf[:i]
	}
	return buf
}

//go:build !unix

package main

import "os"

// blockSize is unknown here: the default buffer size applies.
func blockSize(os.FileInfo) int { return 0 }

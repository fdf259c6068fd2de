package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// rpingBin is the rping binary the end-to-end tests run, built once by
// TestMain into a temporary directory.
var rpingBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rping-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rpingBin = filepath.Join(dir, "rping")
	out, err := exec.Command("go", "build", "-o", rpingBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building rping: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

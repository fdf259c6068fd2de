//go:build !unix

package main

// raiseFileLimit has no open-file limit to lift here.
func raiseFileLimit() {}

//go:build verbs && linux && cgo

package main

// With -tags verbs, verbs IAs (real NICs, rxe, siw) are available too.
import _ "github.com/rdmanet/rdmanet/dat/verbs"

//go:build verbs && linux && cgo

package interop_test

// Both providers meet here: the pure-Go iwarp one and verbs over the
// kernel's siw0.
import (
	_ "github.com/rdmanet/rdmanet/dat/iwarp"
	_ "github.com/rdmanet/rdmanet/dat/verbs"
)

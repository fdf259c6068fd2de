//go:build verbs && linux && cgo

package dat_test

import _ "github.com/rdmanet/rdmanet/dat/verbs"

// verbsBuiltIn reports whether this test binary links the verbs provider.
const verbsBuiltIn = true

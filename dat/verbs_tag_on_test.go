//go:build verbs && linux && cgo

package dat_test

// verbsBuiltIn reports whether this test binary links the verbs provider.
const verbsBuiltIn = true

//go:build verbs && linux && cgo

package rdmanet

// With -tags verbs the tests can run on a verbs IA (RDMANET_TEST_IA).
import _ "github.com/rdmanet/rdmanet/dat/verbs"

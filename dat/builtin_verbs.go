//go:build verbs && linux && cgo

package dat

import "github.com/rdmanet/rdmanet/dat/verbs"

// With -tags verbs the cgo provider over rdma-core is available as
// "verbs", for real NICs, soft-RoCE (rxe) and soft-iWARP (siw).
func init() { Register("verbs", verbs.Driver{}) }

//go:build !(verbs && linux && cgo)

package dat

import (
	"context"
	"fmt"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// noVerbs stands in for the verbs provider in binaries built without it, so
// that asking for a verbs IA says how to get one instead of "not found".
type noVerbs struct{}

func (noVerbs) Open(context.Context, []string) (driver.IA, error) {
	return nil, fmt.Errorf("the verbs provider is not in this binary: rebuild with `go build -tags verbs` "+
		"(needs cgo and Debian's libibverbs-dev and librdmacm-dev): %w", driver.ErrNotSupported)
}

func init() { Register("verbs", noVerbs{}) }

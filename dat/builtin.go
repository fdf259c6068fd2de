package dat

import "github.com/rdmanet/rdmanet/dat/iwarp"

// The pure-Go iWARP provider is always available: it needs nothing but TCP.
func init() { Register("iwarp", iwarp.Driver{}) }

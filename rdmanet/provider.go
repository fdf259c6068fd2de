package rdmanet

// The pure-Go iWARP provider is rdmanet's default IA: it needs nothing but
// TCP, so Dial and Listen work on any machine. Package dat imports no
// provider; rdmanet brings in the default one.
import _ "github.com/rdmanet/rdmanet/dat/iwarp"

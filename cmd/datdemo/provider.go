package main

// The pure-Go iWARP provider, the default IA.
import _ "github.com/rdmanet/rdmanet/dat/iwarp"

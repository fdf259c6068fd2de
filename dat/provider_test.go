package dat_test

// Package dat imports no provider: a program gets one by importing its
// package, as these tests do.
import _ "github.com/rdmanet/rdmanet/dat/iwarp"

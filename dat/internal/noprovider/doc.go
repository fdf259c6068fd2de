// Package noprovider holds a test of package dat in a program that imports
// no provider, which dat's own tests (they import iwarp) cannot be.
package noprovider

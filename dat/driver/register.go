package driver

import (
	"fmt"
	"sort"
	"sync"
)

var (
	driversMu sync.RWMutex
	drivers   = map[string]Driver{}
)

// Register makes a provider available under name, as database/sql.Register
// does for database drivers. A provider package calls it from an init
// function, so a program gets the provider by importing the package (for
// its side effect if it uses nothing else of it). Registering a nil Driver
// or one name twice panics: both are programming errors.
func Register(name string, d Driver) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if d == nil {
		panic("driver: Register of a nil Driver for " + name)
	}
	if _, dup := drivers[name]; dup {
		panic(fmt.Sprintf("driver: Register called twice for provider %q", name))
	}
	drivers[name] = d
}

// Lookup returns the provider registered under name.
func Lookup(name string) (Driver, bool) {
	driversMu.RLock()
	defer driversMu.RUnlock()
	d, ok := drivers[name]
	return d, ok
}

// Names returns the registered provider names, sorted.
func Names() []string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	out := make([]string, 0, len(drivers))
	for n := range drivers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

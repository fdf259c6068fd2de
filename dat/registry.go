package dat

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/rdmanet/rdmanet/dat/driver"
)

// DefaultIAName is the IA name that needs no registry entry: it opens the
// built-in pure-Go iWARP provider on every local address.
const DefaultIAName = "iwarp"

// RegistryEnv names the environment variable that, when set, replaces the
// registry file path (as DAT_OVERRIDE does for DAPL).
const RegistryEnv = "RDMANET_DAT_CONF"

// DefaultRegistryPath is where the registry is read from when RegistryEnv
// is unset. A missing file is not an error: the built-in names still work.
const DefaultRegistryPath = "/etc/rdmanet/dat.conf"

// Register makes a provider available under name, as sql.Register does for
// database drivers. Provider packages call it (through driver.Register)
// from their init functions, so importing a provider package is what makes
// it available. It panics if name is taken or d is nil, because that is a
// programming error at init time.
func Register(name string, d driver.Driver) { driver.Register(name, d) }

// Providers returns the names of the registered providers, sorted.
func Providers() []string { return driver.Names() }

// providerImports names the package that registers each in-tree provider.
var providerImports = map[string]string{
	"iwarp": "github.com/rdmanet/rdmanet/dat/iwarp",
	"verbs": "github.com/rdmanet/rdmanet/dat/verbs",
}

// IsProvider reports whether name is a provider name: a registered
// provider, or one of this module's own that the program did not import
// (OpenIA then says how to get it).
func IsProvider(name string) bool {
	if _, ok := driver.Lookup(name); ok {
		return true
	}
	_, ok := providerImports[name]
	return ok
}

// missingProvider explains an IA whose provider is not in the program:
// package dat imports no provider, so the program must.
func missingProvider(e RegistryEntry) string {
	msg := fmt.Sprintf("IA %q names provider %q, which is not registered in this program", e.IAName, e.Provider)
	if pkg, ok := providerImports[e.Provider]; ok {
		msg += fmt.Sprintf(": add `import _ %q` to the program", pkg)
		if e.Provider == "verbs" {
			msg += " and build it with `-tags verbs` (cgo, with rdma-core's libibverbs-dev and librdmacm-dev)"
		}
	}
	if names := driver.Names(); len(names) > 0 {
		msg += fmt.Sprintf(" (registered: %s)", strings.Join(names, ", "))
	}
	return msg
}

// RegistryEntry is one line of the IA registry. The format follows DAPL's
// dat.conf, with the library field naming a registered Go provider:
//
//	# name   api   threads      default  provider  version  "instance args"  "platform"
//	lo-iw    u2.0  threadsafe   default  iwarp     1.0      "127.0.0.1"      ""
//	rxe0     u2.0  threadsafe   nondefault verbs   1.0      "rxe_if0 0"      ""
//
// Instance args are split on white space and passed to the provider's Open.
type RegistryEntry struct {
	IAName   string
	Provider string
	Default  bool
	Args     []string
	Platform string
}

// ParseRegistry reads registry entries. Blank lines and lines starting with
// '#' are skipped; a malformed line is an error naming its line number.
func ParseRegistry(r io.Reader) ([]RegistryEntry, error) {
	var out []RegistryEntry
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f, err := splitQuoted(line)
		if err != nil {
			return nil, fmt.Errorf("dat registry line %d: %w", n, err)
		}
		if len(f) < 5 {
			return nil, fmt.Errorf("dat registry line %d: want at least 5 fields (name api threads default provider), have %d", n, len(f))
		}
		e := RegistryEntry{IAName: f[0], Provider: f[4]}
		switch f[3] {
		case "default":
			e.Default = true
		case "nondefault":
		default:
			return nil, fmt.Errorf("dat registry line %d: field 4 must be default or nondefault, not %q", n, f[3])
		}
		if len(f) > 6 {
			e.Args = strings.Fields(f[6])
		}
		if len(f) > 7 {
			e.Platform = f[7]
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// splitQuoted splits on white space, keeping "double-quoted" fields whole.
func splitQuoted(s string) ([]string, error) {
	var out []string
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return out, nil
		}
		if s[0] == '"' {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				return nil, errors.New("unterminated quoted field")
			}
			out = append(out, s[1:1+end])
			s = s[2+end:]
			continue
		}
		end := strings.IndexAny(s, " \t")
		if end < 0 {
			end = len(s)
		}
		out = append(out, s[:end])
		s = s[end:]
	}
}

// registryPath is the file the registry is read from.
func registryPath() string {
	if p := os.Getenv(RegistryEnv); p != "" {
		return p
	}
	return DefaultRegistryPath
}

// resolveIA finds the provider and arguments for an IA name: an entry of the
// registry file, else a provider registered under that name (opened with no
// arguments), else "provider:args" with the arguments inline. The empty
// name picks the registry's default entry, else DefaultIAName.
func resolveIA(name string) (RegistryEntry, error) {
	path := registryPath()
	var entries []RegistryEntry
	f, err := os.Open(path)
	switch {
	case err == nil:
		entries, err = ParseRegistry(f)
		f.Close()
		if err != nil {
			return RegistryEntry{}, fmt.Errorf("%s: %w", path, err)
		}
	case errors.Is(err, os.ErrNotExist) && os.Getenv(RegistryEnv) == "":
		// No registry installed: the built-in names still work.
	default:
		return RegistryEntry{}, err
	}
	for _, e := range entries {
		if e.IAName == name || (name == "" && e.Default) {
			return e, nil
		}
	}
	if name == "" {
		name = DefaultIAName
	}
	if IsProvider(name) {
		return RegistryEntry{IAName: name, Provider: name}, nil
	}
	// "provider:args" names a provider and its instance arguments inline,
	// e.g. "iwarp:127.0.0.1 crc=1", for programs that need no registry.
	if prov, args, ok := strings.Cut(name, ":"); ok {
		if IsProvider(prov) {
			return RegistryEntry{IAName: name, Provider: prov, Args: strings.Fields(args)}, nil
		}
	}
	return RegistryEntry{}, fmt.Errorf("IA name %q is neither in the registry %s nor a provider name (providers: %s)",
		name, path, strings.Join(Providers(), ", "))
}

package dat_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// The IA registry (dat.RegistryEntry: "The format follows DAPL's dat.conf,
// with the library field naming a registered Go provider") and how OpenIA
// resolves names through it (dat_ia_open).

// TestRegistryParse: DAPL dat.conf lines — "name api threads default
// provider version "instance args" "platform"" — with comments and blank
// lines skipped and double-quoted fields kept whole.
func TestRegistryParse(t *testing.T) {
	const conf = "# a comment line\n" +
		"\n" +
		"   # an indented comment\n" +
		"lo-iw    u2.0  threadsafe   default    iwarp  1.0  \"127.0.0.1\"   \"\"\n" +
		"\t\n" +
		"rxe0\tu2.0\tthreadsafe\tnondefault\tverbs\t1.0\t\"rxe_if0  0\"\t\"linux x86_64\"\r\n" +
		"bare u2.0 threadsafe nondefault iwarp\n" +
		"opts u2.0 threadsafe nondefault iwarp 1.0 \"127.0.0.1 crc=1 rep_timeout=300ms\"\n"
	got, err := dat.ParseRegistry(strings.NewReader(conf))
	require.NoError(t, err)
	require.Equal(t, []dat.RegistryEntry{
		{IAName: "lo-iw", Provider: "iwarp", Default: true, Args: []string{"127.0.0.1"}, Platform: ""},
		{IAName: "rxe0", Provider: "verbs", Args: []string{"rxe_if0", "0"}, Platform: "linux x86_64"},
		{IAName: "bare", Provider: "iwarp"},
		{IAName: "opts", Provider: "iwarp", Args: []string{"127.0.0.1", "crc=1", "rep_timeout=300ms"}},
	}, got)

	empty, err := dat.ParseRegistry(strings.NewReader("# nothing\n\n"))
	require.NoError(t, err)
	require.Empty(t, empty)

	// "a malformed line is an error naming its line number."
	bad := []struct {
		rule, conf, line string
	}{
		{"fewer than 5 fields", "# ok\nlo u2.0 threadsafe default\n", "line 2"},
		{"field 4 is neither default nor nondefault", "\n\nlo u2.0 threadsafe maybe iwarp 1.0 \"\" \"\"\n", "line 3"},
		{"unterminated quoted field", "ok u2.0 threadsafe default iwarp\nlo u2.0 threadsafe default iwarp 1.0 \"127.0.0.1\n", "line 2"},
	}
	for _, b := range bad {
		t.Run("malformed: "+b.rule, func(t *testing.T) {
			_, err := dat.ParseRegistry(strings.NewReader(b.conf))
			require.Error(t, err)
			require.Contains(t, err.Error(), b.line)
		})
	}
}

// writeConf writes a registry file and points RDMANET_DAT_CONF at it for
// the rest of the test (which must not be parallel).
func writeConf(t *testing.T, conf string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dat.conf")
	require.NoError(t, os.WriteFile(p, []byte(conf), 0o644))
	t.Setenv(dat.RegistryEnv, p)
	return p
}

// openAndClose opens name and closes it again, returning the IA's name.
func openAndClose(t *testing.T, name string) string {
	t.Helper()
	ia, err := dat.OpenIA(context.Background(), name, nil)
	require.NoError(t, err)
	got := ia.Name()
	require.NoError(t, ia.Close(dat.CloseGraceful))
	return got
}

// dat_ia_open resolution: a registry entry by name; for the empty name the
// registry's default entry, else DefaultIAName; a provider name needs no
// entry; "provider:args" gives the arguments inline.
func TestRegistryResolution(t *testing.T) {
	writeConf(t, "# test registry\n"+
		"first  u2.0 threadsafe nondefault iwarp 1.0 \"127.0.0.1\" \"\"\n"+
		"dflt   u2.0 threadsafe default    iwarp 1.0 \"127.0.0.1 rep_timeout=300ms\" \"\"\n"+
		"ghost  u2.0 threadsafe nondefault nosuchprovider 1.0 \"\" \"\"\n"+
		"badarg u2.0 threadsafe nondefault iwarp 1.0 \"127.0.0.1 no_such_option=1\" \"\"\n")

	t.Run("an entry is found by its name", func(t *testing.T) {
		require.Equal(t, "first", openAndClose(t, "first"))
	})
	t.Run("the empty name opens the default entry", func(t *testing.T) {
		require.Equal(t, "dflt", openAndClose(t, ""))
	})
	t.Run("a provider name needs no registry entry", func(t *testing.T) {
		require.Contains(t, dat.Providers(), dat.DefaultIAName)
		require.Equal(t, "iwarp", openAndClose(t, "iwarp"))
	})
	t.Run("provider:args names the arguments inline", func(t *testing.T) {
		// The suite's provider on the suite's address; iwarp also takes
		// an option.
		name := testProvider + ":" + loopback.String()
		if testProvider == "iwarp" {
			name += " rep_timeout=300ms"
		}
		ia, err := dat.OpenIA(context.Background(), name, nil)
		require.NoError(t, err)
		a, _, err := ia.Query()
		require.NoError(t, err)
		require.Equal(t, loopback, a.LocalAddr)
		require.NoError(t, ia.Close(dat.CloseGraceful))
	})
	t.Run("DAT_PROVIDER_NOT_FOUND: unknown IA name", func(t *testing.T) {
		_, err := dat.OpenIA(context.Background(), "no-such-ia", nil)
		requireExact(t, err, dat.ProviderNotFound, dat.NameNotRegistered)
		require.ErrorIs(t, err, dat.ErrProviderNotFound)
		require.Contains(t, err.Error(), "no-such-ia")
	})
	t.Run("DAT_PROVIDER_NOT_FOUND: the entry names an unregistered provider", func(t *testing.T) {
		_, err := dat.OpenIA(context.Background(), "ghost", nil)
		requireCode(t, err, dat.ProviderNotFound, dat.NoSubtype)
		require.Contains(t, err.Error(), "nosuchprovider")
	})
	t.Run("the provider refuses bad instance arguments", func(t *testing.T) {
		_, err := dat.OpenIA(context.Background(), "badarg", nil)
		require.Error(t, err)
		require.Contains(t, err.Error(), "no_such_option")
	})
	t.Run("verbs in a build without -tags verbs says how to get it", func(t *testing.T) {
		if verbsBuiltIn {
			t.Skip("this binary was built with -tags verbs")
		}
		require.NotContains(t, dat.Providers(), "verbs")
		_, err := dat.OpenIA(context.Background(), "verbs", nil)
		requireCode(t, err, dat.ProviderNotFound, dat.NameNotRegistered)
		require.Contains(t, err.Error(), "-tags verbs")
		require.Contains(t, err.Error(), `import _ "github.com/rdmanet/rdmanet/dat/verbs"`)
		require.True(t, dat.Code(err).IsError())
	})
	t.Run("DAT_INVALID_PARAMETER: negative async EVD queue length", func(t *testing.T) {
		_, err := dat.OpenIA(context.Background(), "first", &dat.IAOptions{AsyncEVDQLen: -1})
		requireCode(t, err, dat.InvalidParameter, dat.NoSubtype)
	})
}

// With no default entry, the empty name opens DefaultIAName.
func TestRegistryNoDefaultEntry(t *testing.T) {
	writeConf(t, "only u2.0 threadsafe nondefault iwarp 1.0 \"127.0.0.1\" \"\"\n")
	require.Equal(t, dat.DefaultIAName, openAndClose(t, ""))
}

// RDMANET_DAT_CONF names the registry: a missing file there is an error
// (only the built-in default path may be absent), and so is a malformed
// file, whose error names the line.
func TestRegistryFileErrors(t *testing.T) {
	t.Run("RDMANET_DAT_CONF names a missing file", func(t *testing.T) {
		t.Setenv(dat.RegistryEnv, filepath.Join(t.TempDir(), "absent.conf"))
		for _, name := range []string{"lo", "iwarp", ""} {
			_, err := dat.OpenIA(context.Background(), name, nil)
			require.Error(t, err, "IA %q", name)
			require.ErrorIs(t, err, fs.ErrNotExist)
			requireCode(t, err, dat.ProviderNotFound, dat.NoSubtype)
		}
	})
	t.Run("a malformed registry file", func(t *testing.T) {
		writeConf(t, "# header\nlo u2.0 threadsafe default iwarp 1.0 \"127.0.0.1\" \"\"\nbroken u2.0\n")
		_, err := dat.OpenIA(context.Background(), "lo", nil)
		require.Error(t, err)
		require.Contains(t, err.Error(), "line 3")
	})
	t.Run("RDMANET_DAT_CONF unset and no file at the default path", func(t *testing.T) {
		if _, err := os.Stat(dat.DefaultRegistryPath); !errors.Is(err, fs.ErrNotExist) {
			t.Skipf("%s exists on this machine", dat.DefaultRegistryPath)
		}
		t.Setenv(dat.RegistryEnv, "")
		require.Equal(t, "iwarp", openAndClose(t, "iwarp"))
		_, err := dat.OpenIA(context.Background(), "lo", nil)
		requireCode(t, err, dat.ProviderNotFound, dat.NoSubtype)
	})
}

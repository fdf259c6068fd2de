package noprovider

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// Package dat imports no provider: in a program that imported none,
// opening the default IA says which import to add.
func TestOpenIAWithoutProvider(t *testing.T) {
	empty := t.TempDir() + "/dat.conf"
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	t.Setenv(dat.RegistryEnv, empty) // no entries: names resolve as provider names
	require.Empty(t, dat.Providers())
	for _, name := range []string{"", "iwarp", "iwarp:127.0.0.1"} {
		_, err := dat.OpenIA(context.Background(), name, nil)
		require.Error(t, err, "IA %q", name)
		require.Equal(t, dat.ClassError|dat.ProviderNotFound|dat.Return(dat.NameNotRegistered), dat.Code(err))
		require.Contains(t, err.Error(), `import _ "github.com/rdmanet/rdmanet/dat/iwarp"`, "IA %q", name)
	}
	_, err := dat.OpenIA(context.Background(), "verbs", nil)
	require.Contains(t, err.Error(), `import _ "github.com/rdmanet/rdmanet/dat/verbs"`)
	require.Contains(t, err.Error(), "-tags verbs")
}

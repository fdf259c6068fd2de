package wire

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestImmRoundTrip(t *testing.T) {
	for _, m := range []Imm{
		{},
		{Grant: 1, Advance: 1},
		{Grant: MaxImmGrant, Advance: MaxImmAdvance},
		{Grant: 16, Advance: 65536},
	} {
		v, err := AppendImm(m)
		require.NoError(t, err, "%+v", m)
		got, err := ParseImm(v)
		require.NoError(t, err, "%#x", v)
		require.Equal(t, m, got)
	}
}

// TestImmLayout pins the bit layout the package doc gives.
func TestImmLayout(t *testing.T) {
	v, err := AppendImm(Imm{Grant: 0xa5, Advance: 0x12345})
	require.NoError(t, err)
	require.Equal(t, uint32(0b01)<<30|0xa5<<22|0x12345, v)
	// Zero is never a valid value: the kind bits are set.
	v, err = AppendImm(Imm{})
	require.NoError(t, err)
	require.NotZero(t, v)
}

func TestImmRefuses(t *testing.T) {
	_, err := AppendImm(Imm{Grant: MaxImmGrant + 1})
	require.ErrorContains(t, err, "grant 256")
	_, err = AppendImm(Imm{Advance: MaxImmAdvance + 1})
	require.ErrorContains(t, err, "advance 4194304")
	for _, v := range []uint32{0, 0x3fffffff, 0x80000001, 0xffffffff} {
		_, err := ParseImm(v)
		require.ErrorContains(t, err, "unknown kind", "%#x", v)
	}
}

// FuzzParseImm: every value either parses into fields that encode back
// to it, or is refused; nothing panics.
func FuzzParseImm(f *testing.F) {
	for _, v := range []uint32{0, 1, 0x40000000, 0x7fffffff, 0x80000000, 0xffffffff, 0x4a812345} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v uint32) {
		m, err := ParseImm(v)
		if err != nil {
			return
		}
		back, err := AppendImm(m)
		if err != nil {
			t.Fatalf("ParseImm(%#x) = %+v, which AppendImm refuses: %v", v, m, err)
		}
		if back != v {
			t.Fatalf("ParseImm(%#x) = %+v encodes back to %#x", v, m, back)
		}
	})
}

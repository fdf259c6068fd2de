package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestChecksumCheckValue(t *testing.T) {
	if got := Checksum([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("CRC-32C check value = %08x, want e3069283", got)
	}
	if got := CRC(0).Update([]byte("123456789")).Sum32(); got != 0xE3069283 {
		t.Fatalf("CRC.Update check value = %08x", got)
	}
	if CRC(0).Sum32() != 0 {
		t.Fatal("zero CRC must be the CRC of no data")
	}
}

// Feeding any split of the data must give the one-shot result: that is
// what lets the receiver hash header, payload in place and pad separately.
func TestCRCIncremental(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 5000)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	want := crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
	for range 200 {
		var c CRC
		rest := data
		for len(rest) > 0 {
			n := r.IntN(len(rest) + 1)
			c = c.Update(rest[:n])
			rest = rest[n:]
		}
		if c.Sum32() != want {
			t.Fatalf("split CRC %08x, want %08x", c.Sum32(), want)
		}
	}
}

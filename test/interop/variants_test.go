//go:build verbs && linux && cgo

package interop_test

import "testing"

// iwarpVariants are iwarp provider options that change what goes on the
// wire, each checked against siw with the whole data path.
var iwarpVariants = []struct{ name, options string }{
	// crc=1: the iwarp provider asks for CRC as initiator (siw's
	// responder echoes C) and forces it as responder (siw's initiator
	// accepts a Reply with C), so every FPDU either way carries a
	// CRC-32C the other side checks: a wrong polynomial, coverage or byte
	// order breaks the connection at the first FPDU.
	{"crc", "crc=1"},
	// mulpdu=1024: the iwarp provider cuts messages into FPDUs of at most
	// 1 KiB, as on a 1500-byte Ethernet rather than the guest's loopback,
	// so siw reassembles every larger Send, Write and Read Response from
	// hundreds of DDP segments.
	{"small_fpdus", "mulpdu=1024"},
}

// The data path of TestSendRecv, TestRDMAWrite and TestRDMARead, both
// ways in both directions, with each iwarp variant.
func TestDataPathVariants(t *testing.T) {
	for _, v := range iwarpVariants {
		t.Run(v.name, func(t *testing.T) {
			bothDirectionsWith(t, v.options, func(t *testing.T, a, p *side) {
				l := connect(t, a, p)
				t.Run("send", func(t *testing.T) {
					sendAll(t, a, p, l.aep, l.pep, 700)
					sendAll(t, p, a, l.pep, l.aep, 710)
				})
				t.Run("write", func(t *testing.T) {
					writeAll(t, a, p, l.aep, l.pep, 720)
					writeAll(t, p, a, l.pep, l.aep, 730)
				})
				t.Run("read", func(t *testing.T) {
					readAll(t, a, p, l.aep, 740)
					readAll(t, p, a, l.pep, 750)
				})
			})
		})
	}
}

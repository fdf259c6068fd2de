package wire

import "hash/crc32"

// castagnoli is built once; hash/crc32 picks the SSE4.2/ARMv8 instructions
// for this polynomial, which is what keeps the per-FPDU CRC cheap.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC is a running MPA CRC-32C (Castagnoli, RFC 5044 §4.4). The zero value
// is the CRC of no data, and at every step the value is the finished CRC of
// everything fed so far, so it can be carried across non-contiguous pieces
// (header, payload read straight into user memory, pad) without a buffer:
//
//	c := wire.CRC(0).Update(hdr).Update(payload)
//
// CRC is a value type so that it costs nothing to keep one per FPDU.
type CRC uint32

// Update returns the CRC extended by p.
func (c CRC) Update(p []byte) CRC { return CRC(crc32.Update(uint32(c), castagnoli, p)) }

// Sum32 returns the CRC-32C value of the data fed so far.
func (c CRC) Sum32() uint32 { return uint32(c) }

// Checksum returns the CRC-32C of p ("123456789" gives 0xE3069283).
func Checksum(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

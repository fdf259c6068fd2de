// Package wire encodes and decodes the iWARP protocol headers exactly as
// Linux soft-iWARP (siw) puts them on a TCP stream: the MPA Request/Reply
// handshake frames (RFC 5044 §7.1.1, RFC 6581), MPA FPDU framing with its
// pad and CRC-32C trailer (RFC 5044 §4), the DDP tagged/untagged headers
// (RFC 5041), the RDMAP Read Request and Terminate messages (RFC 5040).
//
// The package is pure: no I/O, no connection state, no goroutines. Every
// codec is a Parse/Append pair. Parse fills a caller-owned struct and never
// allocates; byte slices in parsed structs alias the input. Append appends
// to a caller-provided slice. Nothing panics on any input; malformed input
// yields an error. Errors that correspond to a Terminate the peer should be
// sent are *ProtocolError values carrying the Terminate layer, error type
// and error code that siw would use (see CauseOf), so the provider can map
// them straight onto a Terminate message.
//
// Receive path, as a reader over a TCP stream would use it (siw reads the
// same way, so a Go reader never consumes bytes that belong to the next
// FPDU):
//
//	read 4 bytes                        -> op, ulpduLen, err := ParseControl(b)
//	read op.HeaderLen()-4 more bytes    -> h.Parse(b) (+ ReadRequest/Terminate body)
//	read payload straight into memory   -> crc = crc.Update(piece) for each piece
//	read TrailerLen(ulpduLen) bytes     -> CheckTrailer(trailer, ulpduLen, crc, crcOn)
//
// Send path: h.Append(hdr, len(payload)) builds the header including the
// ULPDU_Length field, AppendFPDUTrailer(trailer, hdr, payload, crcOn) builds
// pad and CRC over the non-contiguous pieces, and net.Buffers{hdr, payload,
// trailer} goes to the socket without copying the payload.
//
// Byte order is big-endian throughout except the CRC trailer, which siw
// writes as the little-endian encoding of the CRC-32C value.
package wire

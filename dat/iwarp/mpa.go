package iwarp

import (
	"errors"
	"fmt"
	"io"

	"github.com/rdmanet/rdmanet/dat/driver"
	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// This file is the I/O glue around wire's MPA Request/Reply codec: reading
// exactly one frame off a TCP stream and writing one.

// errConsumerPDTooLong: a frame without the v2 block carried more consumer
// private data than IAAttr.MaxPrivateData promises consumers.
var errConsumerPDTooLong = errors.New("MPA private data exceeds the 252-byte consumer limit")

// notMPAError reports bytes that cannot begin an MPA frame of the kind
// being read: the peer does not speak MPA (a plain TCP client or server).
// It wraps driver.ErrNotRDMAPeer.
type notMPAError struct {
	kind wire.MPAKind
	got  []byte // what had arrived when a wrong byte was seen (at most the key's length)
}

func (e *notMPAError) Error() string {
	what := "Request"
	if e.kind == wire.MPAReply {
		what = "Reply"
	}
	return fmt.Sprintf("%q does not begin an MPA %s: %v", e.got, what, driver.ErrNotRDMAPeer)
}

func (e *notMPAError) Unwrap() error { return driver.ErrNotRDMAPeer }

// matchKey reads the MPA key of the given kind into buf, which holds at
// least wire.MPAKeyLen and at most wire.MPAHeaderLen bytes, of which the
// first n were read already. It reads whatever the peer has sent, never
// more than buf (so never past the frame's header), and fails with a
// *notMPAError as soon as a byte differs from the key, so a peer that does
// not speak MPA is recognised from its first bytes, without waiting for a
// whole header. A buf as long as the header takes a frame's header in one
// read. It returns how many bytes buf holds.
func matchKey(r io.Reader, kind wire.MPAKind, buf []byte, n int) (int, error) {
	want := kind.Key()
	var err error
	for empty := 0; ; {
		// Bytes first, then the error that came with them: a wrong byte
		// followed by EOF is a wrong byte.
		if k := min(n, len(want)); string(buf[:k]) != want[:k] {
			return n, &notMPAError{kind: kind, got: clone(buf[:n])}
		}
		if n >= len(want) {
			return n, nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) && n > 0 {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		}
		var m int
		m, err = r.Read(buf[n:])
		n += m
		if m == 0 && err == nil {
			if empty++; empty >= 100 {
				err = io.ErrNoProgress // as bufio does for a broken reader
			}
		}
	}
}

// An MPA frame is read in two steps, matchKey and readMPARest. They read
// at most the 20-byte header and then exactly PD_Length bytes and nothing more:
// bytes behind the frame belong to the FPDU stream (and from siw there
// must be none before the other side answered). Bytes that are not the
// frame's key fail it at once (see matchKey). Frames with a PD_Length over
// siw's 256 are refused before their private data is read.
//
// A Request whose E flag cannot be honoured is handled like siw does
// (siw_proc_mpareq): with revision < 2 the flag is ignored; with revision 2
// but fewer than 4 bytes of private data the frame is returned without E
// and shortV2 set, and the caller refuses it with a reject Reply.
// readMPARest reads the rest of a frame once the first n bytes of hdr,
// n >= wire.MPAKeyLen, hold its key (see above).
func readMPARest(r io.Reader, kind wire.MPAKind, hdr *[wire.MPAHeaderLen]byte, n int) (f wire.MPAFrame, shortV2 bool, err error) {
	if _, err := io.ReadFull(r, hdr[n:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the key promised a header
		}
		return f, false, err
	}
	f, shortV2, err = parseMPAHeader(kind, hdr)
	if err != nil {
		return f, false, err
	}
	pd := make([]byte, f.Header.PDLength)
	if _, err := io.ReadFull(r, pd); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the header promised more
		}
		return f, false, err
	}
	return f, shortV2, parseMPAPrivateData(&f, pd)
}

// readReply reads the MPA Reply whose first n bytes buf holds, n at
// least the key's length (see matchKey, which the initiator gives all of
// buf, so that a Reply that has arrived whole takes one read). Bytes
// behind the Reply are an error, not part of the FPDU stream: the
// responder must not send before the initiator's first FPDU (RFC 5044
// §7.1.2), and the initiator never asks for peer-to-peer mode. The
// frame's private data is a part of buf.
func readReply(r io.Reader, buf *[wire.MPAHeaderLen + maxWirePrivateData]byte, n int) (wire.MPAFrame, error) {
	if n < wire.MPAHeaderLen {
		m, err := io.ReadAtLeast(r, buf[n:], wire.MPAHeaderLen-n)
		n += m
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the key promised a header
			}
			return wire.MPAFrame{}, err
		}
	}
	f, _, err := parseMPAHeader(wire.MPAReply, (*[wire.MPAHeaderLen]byte)(buf[:wire.MPAHeaderLen]))
	if err != nil {
		return f, err
	}
	end := wire.MPAHeaderLen + int(f.Header.PDLength)
	if n > end {
		return f, fmt.Errorf("%d bytes behind the frame, sent before the initiator's first FPDU", n-end)
	}
	if _, err := io.ReadFull(r, buf[n:end]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the header promised more
		}
		return f, err
	}
	return f, parseMPAPrivateData(&f, buf[wire.MPAHeaderLen:end])
}

// parseMPAHeader parses a frame's header as readMPARest does (see above
// for shortV2).
func parseMPAHeader(kind wire.MPAKind, hdr *[wire.MPAHeaderLen]byte) (f wire.MPAFrame, shortV2 bool, err error) {
	err = f.Header.Parse(hdr[:], kind, maxWirePrivateData)
	if kind == wire.MPARequest && (errors.Is(err, wire.ErrMPAEnhancedRevision) || errors.Is(err, wire.ErrMPAEnhancedPrivateData)) {
		shortV2 = errors.Is(err, wire.ErrMPAEnhancedPrivateData)
		hdr[wire.MPAKeyLen] &^= byte(wire.MPAFlagEnhanced)
		err = f.Header.Parse(hdr[:], kind, maxWirePrivateData)
	}
	return f, shortV2, err
}

// parseMPAPrivateData parses the PD_Length bytes that follow f's header.
func parseMPAPrivateData(f *wire.MPAFrame, pd []byte) error {
	if err := f.ParsePrivateData(pd); err != nil {
		return err
	}
	if len(f.PrivateData) > MaxPrivateData {
		return errConsumerPDTooLong
	}
	return nil
}

// writeMPA writes f in one Write, so the frame leaves in one segment
// (TCP_NODELAY is set) and a peer never sees half a frame linger.
func writeMPA(w io.Writer, f *wire.MPAFrame) error {
	b, err := f.Append(make([]byte, 0, f.Len()))
	if err != nil {
		return fmt.Errorf("encoding MPA frame: %w", err)
	}
	_, err = w.Write(b)
	return err
}

// v2Limit converts a negotiated depth to the 14-bit wire field.
func v2Limit(n int) uint16 { return uint16(min(max(n, 0), wire.MaxIRDORD)) }

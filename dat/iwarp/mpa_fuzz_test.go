package iwarp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/rdmanet/rdmanet/dat/iwarp/internal/wire"
)

// checkReadReply reads data as the initiator reads a Reply (matchKey
// given the whole buffer, then readReply), in reads as large as chunk
// says, and checks it agrees with readMPA, which got fr, err and consumed
// bytes reading data: the same frame, or an error where readMPA failed
// or where the reads went past the frame.
func checkReadReply(t *testing.T, data []byte, chunk uint8, fr wire.MPAFrame, err error, consumed int) {
	t.Helper()
	n := 1 + int(chunk%20)
	if chunk%20 == 0 {
		n = len(data) + 1 // the whole Reply in one read
	}
	r := &chunkReader{data: data, n: n}
	var buf [wire.MPAHeaderLen + maxWirePrivateData]byte
	k, err2 := matchKey(r, wire.MPAReply, buf[:], 0)
	var f2 wire.MPAFrame
	if err2 == nil {
		f2, err2 = readReply(r, &buf, k)
	}
	consumed2 := len(data) - len(r.data)
	switch {
	case err != nil && err2 == nil:
		t.Fatalf("readReply took %q, readMPA: %v", data, err)
	case err == nil && err2 == nil:
		if f2.Header != fr.Header || f2.V2 != fr.V2 || !bytes.Equal(f2.PrivateData, fr.PrivateData) || consumed2 != consumed {
			t.Fatalf("readReply read %+v in %d bytes, readMPA %+v in %d", f2, consumed2, fr, consumed)
		}
	case err == nil && consumed2 <= consumed:
		t.Fatalf("readReply failed on a whole Reply with nothing behind it read: %v", err2)
	}
}

// readMPA reads a whole frame as the handshake sides do.
func readMPA(r io.Reader, kind wire.MPAKind) (f wire.MPAFrame, shortV2 bool, err error) {
	var hdr [wire.MPAHeaderLen]byte
	n, err := matchKey(r, kind, hdr[:], 0)
	if err != nil {
		return f, false, err
	}
	return readMPARest(r, kind, &hdr, n)
}

// chunkReader returns data in reads of at most n bytes, as a TCP stream
// may cut it.
type chunkReader struct {
	data []byte
	n    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	m := copy(p[:min(len(p), r.n)], r.data)
	r.data = r.data[m:]
	return m, nil
}

// FuzzReadMPA: the MPA frame reader of both handshake sides (key match,
// header, private data) and the listener's classification of a peeked
// first segment never panic, never read past the frame, recognise bytes
// that are not MPA from the key alone (in the reads that take the
// header: a read may return more than the key), and agree with each
// other; the initiator's Reply reader, which may read past the frame in
// its one read, then fails.
func FuzzReadMPA(f *testing.F) {
	req := wire.MPAFrame{Header: wire.MPAHeader{Kind: wire.MPARequest, Revision: 2, Flags: wire.MPAFlagEnhanced},
		V2: wire.MPAv2{IRD: 1, ORD: 1}, PrivateData: []byte("pd")}
	reqBytes, _ := req.Append(nil)
	rep := req
	rep.Header.Kind = wire.MPAReply
	repBytes, _ := rep.Append(nil)
	for _, seed := range [][]byte{
		reqBytes, repBytes, append(reqBytes, "trailing FPDU"...),
		[]byte("GET / HTTP/1.1\r\n\r\n"), []byte("HTTP/1.1 400 Bad Request\r\n"),
		[]byte("MPA ID Re"), []byte("MPA ID Req Frame\x10\x02\xff\xff"), nil,
	} {
		f.Add(seed, uint8(0), false)
		f.Add(seed, uint8(3), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8, reply bool) {
		kind := wire.MPARequest
		if reply {
			kind = wire.MPAReply
		}
		r := &chunkReader{data: data, n: 1 + int(chunk%20)}
		fr, _, err := readMPA(r, kind)
		consumed := len(data) - len(r.data)
		if consumed > wire.MPAHeaderLen+maxWirePrivateData {
			t.Fatalf("read %d bytes, more than any frame", consumed)
		}
		key := kind.Key()
		k := min(len(data), len(key))
		isKey := string(data[:k]) == key[:k]
		var notMPA *notMPAError
		switch {
		case errors.As(err, &notMPA):
			if isKey || consumed > wire.MPAHeaderLen || !bytes.Equal(notMPA.got, data[:consumed]) {
				t.Fatalf("not-MPA verdict on %q after %d bytes, got %q", data, consumed, notMPA.got)
			}
		case !isKey:
			t.Fatalf("%q does not start with the key, but readMPA said %v", data, err)
		case err == nil:
			if want := wire.MPAHeaderLen + int(binary.BigEndian.Uint16(data[18:])); consumed != want {
				t.Fatalf("frame of %d bytes read as %d", want, consumed)
			}
			if len(fr.PrivateData) > MaxPrivateData {
				t.Fatalf("%d bytes of private data accepted", len(fr.PrivateData))
			}
		}
		if kind == wire.MPAReply {
			checkReadReply(t, data, chunk, fr, err, consumed)
			return
		}
		switch classifyFirstBytes(data[:min(len(data), wire.MPAHeaderLen+maxWirePrivateData)]) {
		case firstBytesNotMPA:
			if notMPA == nil {
				t.Fatalf("classified %q as not MPA, readMPA: %v", data, err)
			}
		case firstBytesRequest:
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("classified %q as a whole Request, readMPA ran out: %v", data, err)
			}
		default:
			if notMPA != nil {
				t.Fatalf("classified %q as undecided, readMPA: %v", data, err)
			}
		}
	})
}

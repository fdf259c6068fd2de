package main

import (
	"encoding/binary"
	"fmt"
)

// infoLen is the size of struct rping_rdma_info on the wire.
const infoLen = 16

// rdmaInfo is struct rping_rdma_info: the 16-byte big-endian message both
// sides Send. The client advertises a buffer with it (its start_buf for
// the server's RDMA Read, then its rdma_buf for the RDMA Write); the
// server's "go ahead" is the same struct left all zero.
type rdmaInfo struct {
	Buf  uint64 // registered address of the buffer (the iWARP TO)
	RKey uint32 // its rkey (the iWARP STag)
	Size uint32 // the sender's -S size
}

// parseInfo decodes a received message. rping accepts exactly 16 bytes.
func parseInfo(b []byte) (rdmaInfo, error) {
	if len(b) != infoLen {
		return rdmaInfo{}, fmt.Errorf("rping message is %d bytes, want %d", len(b), infoLen)
	}
	return rdmaInfo{
		Buf:  binary.BigEndian.Uint64(b[0:8]),
		RKey: binary.BigEndian.Uint32(b[8:12]),
		Size: binary.BigEndian.Uint32(b[12:16]),
	}, nil
}

// appendInfo appends the 16-byte encoding of m to b.
func appendInfo(b []byte, m rdmaInfo) []byte {
	b = binary.BigEndian.AppendUint64(b, m.Buf)
	b = binary.BigEndian.AppendUint32(b, m.RKey)
	return binary.BigEndian.AppendUint32(b, m.Size)
}

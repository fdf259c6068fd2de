package main

import (
	"encoding/binary"
	"fmt"
)

// params is what the client tells the server to run: the first bytes on an
// rdmanet connection, the connect private data on DAT.
type params struct {
	test   testKind
	echo   bool
	size   uint32
	iters  uint32
	warmup uint32
}

// paramsLen is the encoded size, well within the 56 bytes of private data
// an InfiniBand/RoCE connect request carries.
const paramsLen = 20

// Every encoding starts with "RDPF" and the version.
const (
	paramsMagic   = 0x52445046
	paramsVersion = 1
)

func paramsOf(c *config) params {
	return params{test: c.test, echo: c.echo, size: uint32(c.size), iters: uint32(c.iters), warmup: uint32(c.warmup)}
}

func (p params) append(b []byte) []byte {
	var flags byte
	if p.echo {
		flags |= 1
	}
	b = binary.BigEndian.AppendUint32(b, paramsMagic)
	b = append(b, paramsVersion, byte(p.test), flags, 0)
	b = binary.BigEndian.AppendUint32(b, p.size)
	b = binary.BigEndian.AppendUint32(b, p.iters)
	return binary.BigEndian.AppendUint32(b, p.warmup)
}

// parseParams decodes params from the start of b; trailing bytes (the
// zero padding InfiniBand adds to private data) are ignored.
func parseParams(b []byte) (params, error) {
	if len(b) < paramsLen || binary.BigEndian.Uint32(b) != paramsMagic || b[4] != paramsVersion {
		return params{}, fmt.Errorf("the client's parameters are not an rdmaperf v1 header (%d bytes: % x)", len(b), b[:min(len(b), paramsLen)])
	}
	p := params{
		test: testKind(b[5]), echo: b[6]&1 != 0,
		size: binary.BigEndian.Uint32(b[8:]), iters: binary.BigEndian.Uint32(b[12:]), warmup: binary.BigEndian.Uint32(b[16:]),
	}
	if (p.test != testBW && p.test != testLat) || p.size == 0 || p.size > 1<<30 || p.iters == 0 {
		return params{}, fmt.Errorf("bad parameters from the client: test %d, size %d, iters %d", p.test, p.size, p.iters)
	}
	return p, nil
}

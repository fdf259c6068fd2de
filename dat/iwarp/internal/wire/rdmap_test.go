package wire

import (
	"bytes"
	"testing"
)

func TestOpcodeTable(t *testing.T) {
	tests := []struct {
		op     Opcode
		tagged bool
		qn     uint32
		hdr    int
		minLen int
		name   string
	}{
		{OpWrite, true, QNSend, 16, 14, "RDMA Write"},
		{OpReadRequest, false, QNReadRequest, 48, 46, "RDMA Read Request"},
		{OpReadResponse, true, QNSend, 16, 14, "RDMA Read Response"},
		{OpSend, false, QNSend, 20, 18, "Send"},
		{OpSendInvalidate, false, QNSend, 20, 18, "Send with Invalidate"},
		{OpSendSE, false, QNSend, 20, 18, "Send with SE"},
		{OpSendSEInvalidate, false, QNSend, 20, 18, "Send with SE and Invalidate"},
		{OpTerminate, false, QNTerminate, 24, 22, "Terminate"},
	}
	for _, tc := range tests {
		if !tc.op.Valid() || tc.op.Tagged() != tc.tagged || tc.op.HeaderLen() != tc.hdr ||
			tc.op.MinULPDULength() != tc.minLen || tc.op.String() != tc.name {
			t.Errorf("%d: valid %v tagged %v hdr %d min %d name %q", tc.op, tc.op.Valid(), tc.op.Tagged(),
				tc.op.HeaderLen(), tc.op.MinULPDULength(), tc.op.String())
		}
		if !tc.tagged && tc.op.QN() != tc.qn {
			t.Errorf("%v: QN %d, want %d", tc.op, tc.op.QN(), tc.qn)
		}
	}
	for op := Opcode(8); op < 16; op++ {
		if op.Valid() || op.HeaderLen() != 0 {
			t.Errorf("%d valid", op)
		}
	}
	if Opcode(9).String() != "opcode(9)" {
		t.Errorf("String = %q", Opcode(9).String())
	}
	if ReadRequestHeaderLen != 48 || ReadRequestULPDULength != 46 || TerminateHeaderLen != 24 {
		t.Error("header size constants")
	}
}

func TestReadRequest(t *testing.T) {
	body := unhex(t, "2c5ebb00 000055e7f4029560 00000040 b4eeca00 0000562bc4fc8ba0")
	var r ReadRequest
	if err := r.Parse(body[:27]); err != ErrShortBuffer {
		t.Fatalf("short: %v", err)
	}
	if err := r.Parse(append(body, 0xff)); err != nil {
		t.Fatal(err)
	}
	want := ReadRequest{0x2c5ebb00, 0x000055e7f4029560, 64, 0xb4eeca00, 0x0000562bc4fc8ba0}
	if r != want {
		t.Fatalf("%+v", r)
	}
	if got := r.Append([]byte{7}); !bytes.Equal(got, append([]byte{7}, body...)) {
		t.Fatalf("% x", got)
	}
}

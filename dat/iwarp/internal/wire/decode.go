package wire

// FPDU is one whole decoded FPDU: header plus whichever body its opcode
// carries. It is the convenient form for small control messages, tests,
// fuzzing and diagnostics; the data path normally uses the pieces
// (ParseControl, Header, CheckTrailer) so payload can land in place.
type FPDU struct {
	Header Header
	// ReadRequest is valid when Header.Opcode is OpReadRequest.
	ReadRequest ReadRequest
	// Terminate is valid when Header.Opcode is OpTerminate.
	Terminate Terminate
	// Payload holds the data of Write, Read Response and the Send family.
	// Parse aliases the input.
	Payload []byte
}

// Parse decodes the FPDU at the start of b, which must hold all of it, and
// returns its size (FPDULen of its ULPDU_Length); bytes after it are left
// alone. withCRC says whether CRC was negotiated: if so the trailer is
// checked before the header is interpreted, so that a corrupted header is
// reported as a CRC error (LLP/MPA/2) and not as whatever the corruption
// happens to look like. Pad contents are not checked (siw does not).
func (f *FPDU) Parse(b []byte, withCRC bool) (int, error) {
	l, err := ParseULPDULength(b)
	if err != nil {
		return 0, err
	}
	n := FPDULen(l)
	if len(b) < n {
		return 0, ErrShortBuffer
	}
	end := ULPDULengthLen + l
	if withCRC {
		if err := CheckTrailer(b[end:n], l, CRC(0).Update(b[:end]), true); err != nil {
			return 0, err
		}
	}
	*f = FPDU{}
	hl, err := f.Header.Parse(b[:end])
	if err != nil {
		return 0, err
	}
	rest := b[hl:end]
	switch f.Header.Opcode {
	case OpReadRequest:
		err = f.ReadRequest.Parse(rest)
	case OpTerminate:
		err = f.Terminate.Parse(rest)
	default:
		f.Payload = rest
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Append appends the FPDU: header (ULPDU_Length computed), body by opcode
// (Payload is ignored for Read Request and Terminate), zero pad and the CRC
// trailer (zero when withCRC is false). It copies the payload; to avoid
// that, use Header.Append and AppendFPDUTrailer.
func (f *FPDU) Append(b []byte, withCRC bool) ([]byte, error) {
	start := len(b)
	var rest int
	switch f.Header.Opcode {
	case OpReadRequest:
		rest = ReadRequestBodyLen
	case OpTerminate:
		if !validAttachLen(len(f.Terminate.Attached)) {
			return b[:start], ErrTerminateLength
		}
		rest = f.Terminate.Len()
	default:
		rest = len(f.Payload)
	}
	b, err := f.Header.Append(b, rest)
	if err != nil {
		return b[:start], err
	}
	switch f.Header.Opcode {
	case OpReadRequest:
		b = f.ReadRequest.Append(b)
	case OpTerminate:
		b, _ = f.Terminate.Append(b) // length validated above
	default:
		b = append(b, f.Payload...)
	}
	return AppendFPDUTrailer(b, b[start:], nil, withCRC), nil
}

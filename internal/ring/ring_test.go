package ring

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFreeAndValid(t *testing.T) {
	r := Ring{Size: 100}
	for _, tc := range []struct {
		prod, cons uint64
		valid      bool
		free       uint64
	}{
		{0, 0, true, 100},
		{100, 0, true, 0},
		{150, 60, true, 10},
		{101, 0, false, 0}, // producer more than a ring ahead
		{5, 6, false, 0},   // consumer ahead of producer
		{1<<64 - 1, 1<<64 - 50, true, 51},
	} {
		if got := r.Valid(tc.prod, tc.cons); got != tc.valid {
			t.Errorf("Valid(%d, %d) = %v, want %v", tc.prod, tc.cons, got, tc.valid)
		}
		if got := r.Free(tc.prod, tc.cons); got != tc.free {
			t.Errorf("Free(%d, %d) = %d, want %d", tc.prod, tc.cons, got, tc.free)
		}
	}
}

func TestSegments(t *testing.T) {
	r := Ring{Size: 16}
	for _, tc := range []struct {
		pos, n        uint64
		first, second Segment
	}{
		{0, 0, Segment{0, 0}, Segment{}},
		{0, 16, Segment{0, 16}, Segment{}},
		{5, 11, Segment{5, 11}, Segment{}},
		{5, 12, Segment{5, 11}, Segment{0, 1}},
		{31, 16, Segment{15, 1}, Segment{0, 15}},
		{32, 20, Segment{0, 16}, Segment{}}, // clamped to Size
	} {
		f, s := r.Segments(tc.pos, tc.n)
		if f != tc.first || s != tc.second {
			t.Errorf("Segments(%d, %d) = %v %v, want %v %v", tc.pos, tc.n, f, s, tc.first, tc.second)
		}
	}
	f, s := r.Readable(20, 10) // bytes 10..19: offsets 10..15 and 0..3
	if f != (Segment{10, 6}) || s != (Segment{0, 4}) {
		t.Errorf("Readable = %v %v", f, s)
	}
	f, s = r.Writable(20, 10) // 6 free bytes from offset 4
	if f != (Segment{4, 6}) || s != (Segment{}) {
		t.Errorf("Writable = %v %v", f, s)
	}
	if got := r.Contiguous(14, 10); got != 2 {
		t.Errorf("Contiguous(14, 10) = %d, want 2", got)
	}
}

func TestReturnDue(t *testing.T) {
	r := Ring{Size: 1024}
	const batch, urgent = 256, 32
	for _, tc := range []struct {
		name                 string
		prod, cons, reported uint64
		want                 bool
	}{
		{"nothing consumed", 500, 0, 0, false},
		{"below batch", 500, 100, 0, false},
		{"batch reached", 500, 256, 0, true},
		{"producer full, below urgent", 1024, 16, 0, false},
		{"producer full, urgent reached", 1024, 32, 0, true},
		{"producer full relative to report", 1300, 300, 276, false},
		{"stale report ahead", 500, 100, 200, false},
	} {
		if got := r.ReturnDue(tc.prod, tc.cons, tc.reported, batch, urgent); got != tc.want {
			t.Errorf("%s: ReturnDue = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// FuzzRing drives a producer and a consumer through random step sizes over
// a real buffer, using only the package's arithmetic, and checks that the
// bytes come out in order and the positions stay valid: the property the
// whole data path rests on.
func FuzzRing(f *testing.F) {
	f.Add(uint16(7), []byte{3, 200, 9, 1, 255, 4, 17})
	f.Add(uint16(1), []byte{1, 1, 1})
	f.Add(uint16(4096), []byte{0, 255, 128, 64, 32})
	f.Fuzz(func(t *testing.T, size uint16, steps []byte) {
		if size == 0 {
			return
		}
		r := Ring{Size: uint64(size)}
		buf := make([]byte, size)
		var prod, cons uint64
		var next, expect byte // the byte stream is 0,1,2,...
		for i, s := range steps {
			if !r.Valid(prod, cons) {
				t.Fatalf("step %d: invalid positions %d/%d", i, prod, cons)
			}
			n := uint64(s) * uint64(size) / 255
			if i%2 == 0 { // produce up to n
				n = min(n, r.Free(prod, cons))
				a, b := r.Writable(prod, cons)
				if a.Len+b.Len != r.Free(prod, cons) {
					t.Fatalf("writable %v+%v != free %d", a, b, r.Free(prod, cons))
				}
				a, b = r.Segments(prod, n)
				for _, seg := range []Segment{a, b} {
					for j := seg.Off; j < seg.End(); j++ {
						buf[j] = next
						next++
					}
				}
				prod += n
			} else { // consume up to n
				n = min(n, Used(prod, cons))
				a, b := r.Segments(cons, n)
				got := append(append([]byte(nil), buf[a.Off:a.End()]...), buf[b.Off:b.End()]...)
				for j, c := range got {
					if c != expect {
						t.Fatalf("step %d: byte %d is %d, want %d", i, j, c, expect)
					}
					expect++
				}
				cons += n
			}
		}
		a, b := r.Readable(prod, cons)
		if a.Len+b.Len != Used(prod, cons) {
			t.Fatalf("readable %v+%v != used %d", a, b, Used(prod, cons))
		}
	})
}

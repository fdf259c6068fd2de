//go:build verbs && linux && cgo

package interop_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmanet/rdmanet/dat"
)

// next waits for the next event on evd and checks its number.
func next(t *testing.T, evd *dat.EVD, want dat.EventNumber) dat.Event {
	t.Helper()
	ev, _, err := evd.Wait(dat.TimeoutOf(eventWait), 1)
	require.NoError(t, err, "waiting for %v", want)
	require.Equal(t, want, ev.Number, "event %v (connection error: %v, DTO: %+v)", ev.Number, ev.Conn.Err, ev.DTO)
	return ev
}

// done waits for the next DTO completion on evd and checks that it is the
// successful completion of the given post.
func done(t *testing.T, evd *dat.EVD, cookie uint64, op dat.DTOOp) dat.DTOCompletion {
	t.Helper()
	ev := next(t, evd, dat.DTOCompletionEvent)
	require.Equal(t, dat.DTOSuccess, ev.DTO.Status, "status of cookie %d (op %d)", ev.DTO.Cookie, ev.DTO.Op)
	require.Equal(t, cookie, ev.DTO.Cookie)
	require.Equal(t, op, ev.DTO.Op)
	return ev.DTO
}

// requireCode checks that err is a DAT error of return type typ.
func requireCode(t *testing.T, err error, typ dat.Return) {
	t.Helper()
	require.Error(t, err)
	var de *dat.Error
	require.True(t, errors.As(err, &de), "not a *dat.Error: %v", err)
	require.Equal(t, typ, de.Code.Type(), "DAT return type of %v", err)
}

// requireState checks an EP's state.
func requireState(t *testing.T, ep *dat.EP, want dat.EPState) {
	t.Helper()
	st, err := ep.GetStatus()
	require.NoError(t, err)
	require.Equal(t, want, st.State)
}

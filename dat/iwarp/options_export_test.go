package iwarp

import "syscall"

// QPSocket returns the raw socket of q's connection, for tests that read
// its options; nil when q has no connection.
func QPSocket(q *QP) syscall.RawConn {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.conn == nil {
		return nil
	}
	rc, err := q.conn.tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

package listener

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerClosed reads the TCP state of c: the caller has closed its end when
// the state is CLOSE_WAIT or later, even with bytes of its request still
// unread in the socket (which hide the close from every read until they
// are consumed). Unknown (not TCP, an error) is false.
func peerClosed(c net.Conn) bool {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return
		}
		switch info.State {
		case tcpCloseWait, tcpLastAck, tcpClose:
			closed = true
		}
	})
	return closed
}

// Linux's TCP states (include/net/tcp_states.h) after the peer's FIN.
const (
	tcpClose     = 7
	tcpCloseWait = 8
	tcpLastAck   = 9
)

//go:build !linux

package listener

import "net"

// peerClosed cannot tell without Linux's TCP_INFO: false.
func peerClosed(net.Conn) bool { return false }

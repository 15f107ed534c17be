//go:build !linux

package localsock

import (
	"errors"
	"net"
)

// PeerOf needs SO_PEERCRED, which is Linux's: elsewhere no peer is known,
// so none is trusted and the socket serves no one.
func PeerOf(c *net.UnixConn) (Peer, error) {
	return Peer{}, errors.New("peer credentials need Linux (SO_PEERCRED)")
}

package sessions

// Session ids and instance names.

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// mint makes a new session id: the instance, a dot, 128 random bits.
func (m *Manager) mint() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		id := m.opts.Instance + "." + hex.EncodeToString(b[:])
		if _, taken := m.open[id]; !taken {
			return id
		}
	}
}

// checkInstance refuses ids of other instances by name, so that a call a
// load balancer sent to the wrong instance says where it should have gone.
func (m *Manager) checkInstance(id string) error {
	inst, rest, ok := strings.Cut(id, ".")
	if !ok || inst == m.opts.Instance {
		return nil
	}
	if ValidInstance(inst) == nil && len(rest) == 32 && isHex(rest) {
		return m.errorf(ErrOtherInstance, ": session %q was started by pyrun instance %q, and this is instance %q; the call must reach %q (a load balancer routes on the Mcp-Param-Session-Id header)",
			id, inst, m.opts.Instance, inst)
	}
	return nil
}

func isHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidInstance checks an instance name: 1 to 63 letters, digits and '-'.
func ValidInstance(name string) error {
	if name == "" || len(name) > 63 {
		return fmt.Errorf("instance id must have 1 to 63 characters, not %d", len(name))
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return fmt.Errorf("instance id %q may hold only letters, digits and '-'", name)
		}
	}
	return nil
}

// DefaultInstance is the host name reduced to letters, digits and '-'
// (at most 63 of them), or "pyrun" when nothing is left.
func DefaultInstance() string {
	host, _ := os.Hostname()
	var b strings.Builder
	for _, c := range host {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' {
			b.WriteRune(c)
		}
	}
	name := b.String()
	if len(name) > 63 {
		name = name[:63]
	}
	if name == "" {
		return "pyrun"
	}
	return name
}

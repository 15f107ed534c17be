package supervisor

import (
	"fmt"
	"net"
	"slices"
)

// publicDenyList is what the public network mode denies: deniedNets and
// every address of the host's own interfaces. Services listening on all
// interfaces answer on the host's public and IPv6 addresses too, which no
// IPv4 range in deniedNets covers. It is computed at every worker start, so
// addresses the host gains later are denied to workers started after.
//
// What it cannot deny: other machines' private IPv6 addresses (fc00::/7,
// fe80::/10), since Deno takes no IPv6 ranges; docs/security.md says
// so.
func publicDenyList() ([]string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list the host's addresses to deny them to workers: %w", err)
	}
	deny := slices.Clone(deniedNets)
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLoopback() || n.IP.IsUnspecified() {
			continue
		}
		entry := n.IP.String()
		if n.IP.To4() == nil {
			entry = "[" + entry + "]" // Deno wants IPv6 addresses bracketed
		}
		if !slices.Contains(deny, entry) {
			deny = append(deny, entry)
		}
	}
	return deny, nil
}

package access

import "time"

// SetMinRefresh sets the shortest gap between two fetches of the keys.
func (g *Guard) SetMinRefresh(d time.Duration) {
	g.jwt.keys.mu.Lock()
	defer g.jwt.keys.mu.Unlock()
	g.jwt.keys.minRefresh = d
}

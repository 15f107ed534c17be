package httpfront_test

import (
	"maps"
	"net/http"
	"sync"
	"testing"

	"github.com/pyrun/pyrun/mcp"
	"github.com/pyrun/pyrun/mcp/httpfront"
	"github.com/pyrun/pyrun/mcp/mcptest"
	"github.com/pyrun/pyrun/supervisor"
)

// With several languages, /healthz says each one's pool and is 503 while
// any cannot take calls: "failing" (its workers fail to start) before
// "starting".
func TestHealthOfLanguages(t *testing.T) {
	var mu sync.Mutex
	stats := map[string]supervisor.Stats{
		"python": {Workers: 2, Ready: 1, Busy: 1},
		"r":      {Workers: 1, Starting: 1},
		"js":     {Workers: 1, Ready: 1},
	}
	langStats := func() map[string]supervisor.Stats {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(stats)
	}
	f := startFront(t, mcptest.NewGate(), mcp.Options{}, httpfront.Options{
		Stats:            func() supervisor.Stats { return supervisor.Stats{Workers: 4, Ready: 2, Busy: 1, Starting: 1} },
		LanguageStats:    langStats,
		LanguageSessions: func() map[string]int { return map[string]int{"python": 3} },
	})
	code, body := f.health(t)
	langs, _ := body["languages"].(map[string]any)
	py, _ := langs["python"].(map[string]any)
	if code != http.StatusServiceUnavailable || body["status"] != "starting" || body["workers_ready"] != 3.0 || len(langs) != 3 ||
		py["status"] != "ok" || py["workers_busy"] != 1.0 || py["sessions_open"] != 3.0 {
		t.Errorf("/healthz with R starting: %d %v, want 503 starting with each language's figures", code, body)
	}
	mu.Lock()
	stats["r"] = supervisor.Stats{Workers: 1, StartError: "webR did not start"}
	stats["js"] = supervisor.Stats{Workers: 1, Starting: 1}
	mu.Unlock()
	if code, body = f.health(t); code != http.StatusServiceUnavailable || body["status"] != "failing" {
		t.Errorf("/healthz with R failing and JavaScript starting: %d %v, want 503 failing", code, body)
	}
	mu.Lock()
	stats["r"], stats["js"] = supervisor.Stats{Workers: 1, Ready: 1}, supervisor.Stats{Workers: 1, Busy: 1}
	mu.Unlock()
	if code, body = f.health(t); code != http.StatusOK || body["status"] != "ok" {
		t.Errorf("/healthz with every language up: %d %v, want 200 ok", code, body)
	}
}

// TestHealthNamesClientsWithinBound: /healthz shows the workers each
// client owns, naming at most MaxClients clients; the rest are "other".
func TestHealthNamesClientsWithinBound(t *testing.T) {
	f := startFront(t, mcptest.NewGate(), mcp.Options{}, httpfront.Options{
		MaxClients: 2,
		Stats: func() supervisor.Stats {
			return supervisor.Stats{Workers: 2, Ready: 3, Busy: 2, Fresh: 2, Clients: map[string]supervisor.ClientWorkers{
				"alice": {Busy: 2}, "bob": {Idle: 1}, "carol": {}, "dave": {},
			}}
		},
	})
	_, body := f.health(t)
	by, _ := body["workers_by_client"].(map[string]any)
	alice, _ := by["alice"].(map[string]any)
	if len(by) != 3 || alice["busy"] != 2.0 || by["bob"] == nil || by["other"] == nil || body["workers_fresh"] != 2.0 || body["clients"] != 4.0 {
		t.Errorf("/healthz %v, want alice's and bob's workers, the rest as other, 2 fresh and 4 clients", body)
	}
}

// TestHealthNamesNoClientsBehindAccessControl: /healthz stays open with
// access control, so it counts the clients that own workers but names
// none (names are token names and JWT subjects).
func TestHealthNamesNoClientsBehindAccessControl(t *testing.T) {
	f := startFront(t, mcptest.NewGate(), mcp.Options{}, httpfront.Options{
		Protect: tokens,
		Stats: func() supervisor.Stats {
			return supervisor.Stats{Workers: 2, Ready: 2, Clients: map[string]supervisor.ClientWorkers{
				"alice": {Idle: 1}, "bob": {Idle: 1},
			}}
		},
	})
	_, body := f.health(t)
	if _, named := body["workers_by_client"]; named || body["clients"] != 2.0 {
		t.Errorf("/healthz %v, want 2 clients and no names", body)
	}
}

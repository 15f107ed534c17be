package httpfront

import (
	"encoding/json"
	"net/http"

	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/oswall"
)

// poolHealth is a pool's part of /healthz: all of pyrun's, or one
// language's.
type poolHealth struct {
	Status          string `json:"status"` // ok, starting (no worker up yet) or failing (starts fail)
	WorkersReady    int    `json:"workers_ready"`
	WorkersIdle     int    `json:"workers_idle"`
	WorkersBusy     int    `json:"workers_busy"`
	WorkersStarting int    `json:"workers_starting"`
	WorkersTotal    int    `json:"workers_total"`
	// WorkersFresh: idle workers that never ran a call; Clients: the
	// clients that own workers; WorkersByClient: the workers each owns
	// (Options.MaxClients names at most), only without access control:
	// /healthz is open, and client names are token names and JWT subjects.
	WorkersFresh    int                                 `json:"workers_fresh"`
	Clients         int                                 `json:"clients"`
	WorkersByClient map[string]supervisor.ClientWorkers `json:"workers_by_client,omitempty"`
	Queued          int                                 `json:"queued"`
	SessionsOpen    int                                 `json:"sessions_open"`
	StartError      string                              `json:"start_error,omitempty"`
}

// healthOf is the health of a pool of s with sessions open: ok when at
// least one worker is up (idle or running a call).
// maxClients 0: no client named.
func healthOf(s supervisor.Stats, sessions, maxClients int) poolHealth {
	ph := poolHealth{
		Status: "ok", WorkersReady: s.Ready + s.Busy, WorkersIdle: s.Ready, WorkersBusy: s.Busy,
		WorkersStarting: s.Starting, WorkersTotal: s.Workers, Queued: s.Queued, SessionsOpen: sessions,
		StartError: s.StartError, WorkersFresh: s.Fresh, Clients: len(s.Clients),
	}
	if maxClients > 0 {
		ph.WorkersByClient = s.ClientsWithin(maxClients)
	}
	if ph.WorkersReady == 0 {
		ph.Status = "starting"
		if s.StartError != "" {
			ph.Status = "failing"
		}
	}
	return ph
}

// health answers /healthz: 200 when pyrun's pool is ok and so is every
// language's (a client of this instance may call any of them), 503
// otherwise or while shutting down.
func (h *Handler) health(w http.ResponseWriter, _ *http.Request) {
	sessions := 0
	if h.opts.SessionsOpen != nil {
		sessions = h.opts.SessionsOpen()
	}
	body := struct {
		poolHealth
		MCPSessions    int   `json:"mcp_sessions"`
		MCPSessionsMax int   `json:"mcp_sessions_max"`
		ResultsWaiting int64 `json:"results_waiting_bytes"`
		// Languages: each language's pool, when there are several.
		Languages map[string]poolHealth `json:"languages,omitempty"`
		// OSSandbox: the layers of the OS sandbox in force.
		OSSandbox *oswall.Status `json:"os_sandbox,omitempty"`
	}{
		poolHealth:     healthOf(h.opts.Stats(), sessions, h.namedClients()),
		ResultsWaiting: h.b.Deliveries.WaitingBytes(),
		OSSandbox:      h.opts.OSSandbox,
	}
	body.MCPSessions, body.MCPSessionsMax = h.sessions.counts()
	notOK := "" // the status of a language that cannot take calls
	if h.opts.LanguageStats != nil {
		body.Languages, notOK = h.languagesHealth()
	}
	code := http.StatusOK
	switch {
	case h.draining.Load():
		body.Status, code = "shutting-down", http.StatusServiceUnavailable
	case body.Status != "ok":
		code = http.StatusServiceUnavailable
	case notOK != "":
		body.Status, code = notOK, http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// languagesHealth is every language's health, and the status of the
// worst one that cannot take calls ("failing" before "starting"), or "".
func (h *Handler) languagesHealth() (map[string]poolHealth, string) {
	var open map[string]int
	if h.opts.LanguageSessions != nil {
		open = h.opts.LanguageSessions()
	}
	m := map[string]poolHealth{}
	worst := ""
	for lang, s := range h.opts.LanguageStats() {
		lh := healthOf(s, open[lang], h.namedClients())
		if lh.Status != "ok" && worst != "failing" {
			worst = lh.Status
		}
		m[lang] = lh
	}
	return m, worst
}

// maxClients is how many clients /healthz names: Options.MaxClients, or
// 32.
func (h *Handler) maxClients() int {
	if h.opts.MaxClients > 0 {
		return h.opts.MaxClients
	}
	return 32
}

// namedClients is how many clients /healthz names: none behind access
// control, where /healthz stays open but names are the tokens' and JWTs'.
func (h *Handler) namedClients() int {
	if h.opts.Protect != nil {
		return 0
	}
	return h.maxClients()
}

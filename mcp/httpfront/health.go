package httpfront

import (
	"encoding/json"
	"net/http"

	"github.com/pyrun/pyrun/supervisor/oswall"
)

// health answers /healthz: 200 when at least one worker is up (idle or
// running a call), 503 otherwise or while shutting down.
func (h *Handler) health(w http.ResponseWriter, _ *http.Request) {
	s := h.opts.Stats()
	body := struct {
		Status          string `json:"status"`
		WorkersReady    int    `json:"workers_ready"`
		WorkersIdle     int    `json:"workers_idle"`
		WorkersBusy     int    `json:"workers_busy"`
		WorkersStarting int    `json:"workers_starting"`
		WorkersTotal    int    `json:"workers_total"`
		Queued          int    `json:"queued"`
		SessionsOpen    int    `json:"sessions_open"`
		StartError      string `json:"start_error,omitempty"`
		MCPSessions     int    `json:"mcp_sessions"`
		MCPSessionsMax  int    `json:"mcp_sessions_max"`
		ResultsWaiting  int64  `json:"results_waiting_bytes"`
		// Languages: each language's pool, when there are several.
		Languages map[string]languageHealth `json:"languages,omitempty"`
		// OSSandbox: the layers of the OS sandbox in force.
		OSSandbox *oswall.Status `json:"os_sandbox,omitempty"`
	}{
		Status:          "ok",
		WorkersReady:    s.Ready + s.Busy,
		WorkersIdle:     s.Ready,
		WorkersBusy:     s.Busy,
		WorkersStarting: s.Starting,
		WorkersTotal:    s.Workers,
		Queued:          s.Queued,
		StartError:      s.StartError,
		ResultsWaiting:  h.b.Deliveries.WaitingBytes(),
		OSSandbox:       h.opts.OSSandbox,
	}
	if h.opts.SessionsOpen != nil {
		body.SessionsOpen = h.opts.SessionsOpen()
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
	case body.WorkersReady == 0:
		body.Status, code = "starting", http.StatusServiceUnavailable
		if s.StartError != "" {
			body.Status = "failing"
		}
	case notOK != "":
		// A client of this instance may call any of its languages.
		body.Status, code = notOK, http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// languageHealth is one language's part of /healthz.
type languageHealth struct {
	Status          string `json:"status"` // ok, starting (no worker up yet) or failing (starts fail)
	WorkersReady    int    `json:"workers_ready"`
	WorkersIdle     int    `json:"workers_idle"`
	WorkersBusy     int    `json:"workers_busy"`
	WorkersStarting int    `json:"workers_starting"`
	WorkersTotal    int    `json:"workers_total"`
	Queued          int    `json:"queued"`
	SessionsOpen    int    `json:"sessions_open"`
	StartError      string `json:"start_error,omitempty"`
}

// languagesHealth is every language's health, and the status of the
// worst one that cannot take calls ("failing" before "starting"), or "".
func (h *Handler) languagesHealth() (map[string]languageHealth, string) {
	var open map[string]int
	if h.opts.LanguageSessions != nil {
		open = h.opts.LanguageSessions()
	}
	m := map[string]languageHealth{}
	worst := ""
	for lang, s := range h.opts.LanguageStats() {
		lh := languageHealth{
			Status: "ok", WorkersReady: s.Ready + s.Busy, WorkersIdle: s.Ready, WorkersBusy: s.Busy,
			WorkersStarting: s.Starting, WorkersTotal: s.Workers, Queued: s.Queued, SessionsOpen: open[lang],
			StartError: s.StartError,
		}
		if lh.WorkersReady == 0 {
			lh.Status = "starting"
			if s.StartError != "" {
				lh.Status = "failing"
			}
			if worst != "failing" {
				worst = lh.Status
			}
		}
		m[lang] = lh
	}
	return m, worst
}

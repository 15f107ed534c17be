package mcp

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pyrun/pyrun/supervisor"
)

// Metrics of each language: the same figures as pyrun_calls_total and the
// pool's gauges, which count every language together, labelled with the
// language (a pool each).

func newLanguageCalls() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pyrun_language_calls_total",
		Help: "Tool calls by language and by how they ended, as pyrun_calls_total.",
	}, []string{"language", "status"})
}

// CountLanguages adds each language's pool and sessions, read at each
// scrape: pyrun_language_workers{language,state},
// pyrun_language_workers_configured, pyrun_language_queue_depth,
// pyrun_language_worker_restarts_total{language,reason} and
// pyrun_language_sessions (open sessions; sessions may be nil). Every
// language's call series exist from the start.
func (m *Metrics) CountLanguages(pools func() map[string]supervisor.Stats, sessions func() map[string]int) {
	for lang := range pools() {
		for _, s := range callStatuses {
			m.langCalls.WithLabelValues(lang, s)
		}
	}
	_ = m.reg.Register(&languageCollector{pools: pools, sessions: sessions})
}

type languageCollector struct {
	pools    func() map[string]supervisor.Stats
	sessions func() map[string]int
}

var (
	langWorkersDesc = prometheus.NewDesc("pyrun_language_workers",
		"Workers of a language's pool by state: idle, busy, starting.", []string{"language", "state"}, nil)
	langConfiguredDesc = prometheus.NewDesc("pyrun_language_workers_configured",
		"A language's configured pool size.", []string{"language"}, nil)
	langQueueDesc = prometheus.NewDesc("pyrun_language_queue_depth",
		"Calls waiting for a free worker of a language.", []string{"language"}, nil)
	langRestartsDesc = prometheus.NewDesc("pyrun_language_worker_restarts_total",
		"Workers of a language retired and replaced, by reason.", []string{"language", "reason"}, nil)
	langSessionsDesc = prometheus.NewDesc("pyrun_language_sessions",
		"Open sessions of a language.", []string{"language"}, nil)
)

func (c *languageCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, langWorkersDesc, langConfiguredDesc, langQueueDesc, langRestartsDesc, langSessionsDesc)
}

func (c *languageCollector) Collect(ch chan<- prometheus.Metric) {
	for lang, s := range c.pools() {
		ch <- prometheus.MustNewConstMetric(langWorkersDesc, prometheus.GaugeValue, float64(s.Ready), lang, "idle")
		ch <- prometheus.MustNewConstMetric(langWorkersDesc, prometheus.GaugeValue, float64(s.Busy), lang, "busy")
		ch <- prometheus.MustNewConstMetric(langWorkersDesc, prometheus.GaugeValue, float64(s.Starting), lang, "starting")
		ch <- prometheus.MustNewConstMetric(langConfiguredDesc, prometheus.GaugeValue, float64(s.Workers), lang)
		ch <- prometheus.MustNewConstMetric(langQueueDesc, prometheus.GaugeValue, float64(s.Queued), lang)
		for _, k := range supervisor.RestartKinds() {
			ch <- prometheus.MustNewConstMetric(langRestartsDesc, prometheus.CounterValue, float64(s.Counts.Restarts[k]), lang, string(k))
		}
	}
	if c.sessions == nil {
		return
	}
	for lang, n := range c.sessions() {
		ch <- prometheus.MustNewConstMetric(langSessionsDesc, prometheus.GaugeValue, float64(n), lang)
	}
}

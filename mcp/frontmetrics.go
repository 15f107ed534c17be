package mcp

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pyrun/pyrun/mcp/netguard"
)

// CountConnections adds the HTTP connection counts of a netguard.Listener.
func (m *Metrics) CountConnections(stats func() netguard.Stats) {
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	_ = m.reg.Register(&connCollector{stats: stats,
		open:     desc("pyrun_connections_open", "HTTP connections open."),
		refTotal: desc("pyrun_connections_refused_total", "HTTP connections refused by the cap on connections (max_conns)."),
		refAddr:  desc("pyrun_connections_refused_per_addr_total", "HTTP connections refused by the cap per address (max_conns_per_addr)."),
		bodies:   desc("pyrun_request_bodies_timed_out_total", "Request bodies that did not arrive within body_timeout."),
		unread:   desc("pyrun_answered_before_body_total", "Answers (401, 413, 503...) sent before the request's body was read; the connection was closed."),
	})
}

type connCollector struct {
	stats                                   func() netguard.Stats
	open, refTotal, refAddr, bodies, unread *prometheus.Desc
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.open, c.refTotal, c.refAddr, c.bodies, c.unread} {
		ch <- d
	}
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(s.Open))
	ch <- prometheus.MustNewConstMetric(c.refTotal, prometheus.CounterValue, float64(s.RefusedTotal))
	ch <- prometheus.MustNewConstMetric(c.refAddr, prometheus.CounterValue, float64(s.RefusedPerAddr))
	ch <- prometheus.MustNewConstMetric(c.bodies, prometheus.CounterValue, float64(s.BodiesTimedOut))
	ch <- prometheus.MustNewConstMetric(c.unread, prometheus.CounterValue, float64(s.AnsweredUnread))
}

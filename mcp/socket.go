package mcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pyrun/pyrun/mcp/localsock"
)

// The local socket (docs/contract.md section 16): `pyrun serve --socket PATH` serves
// MCP on a Unix socket, each connection one session of the local client,
// exactly as stdio serves one: the same line filter (stdio.go) in front of
// the go-sdk's IOTransport, so a `pyrun stdio` that bridges its
// stdin/stdout to the socket byte for byte behaves as one with a pool of
// its own. Who may connect is the listener's business (localsock.Guard:
// the same user or root); a connection that gets here is the local client,
// Anonymous, as on stdio, so Python sessions started over one connection
// continue over another.

// socketSeq numbers socket sessions, for their names.
var socketSeq atomic.Uint64

// ServeSocket serves every connection ln accepts until ln is closed. The
// sessions go on until their clients hang up or ctx ends; ServeSocket
// returns once they have all ended. Accept errors other than a closed
// listener (out of descriptors) are waited out, as net/http does.
func (s *Server) ServeSocket(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	log := s.log.Named("socket")
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			log.Warn("accept failed; trying again", "error", err, "in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-ctx.Done():
				return fmt.Errorf("socket: %w", err)
			}
		}
		backoff = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			name := "socket-" + strconv.FormatUint(socketSeq.Add(1), 10)
			peer, _ := localsock.PeerOfConn(c)
			log.Debug("local client connected", "session", name, "pid", peer.PID, "uid", peer.UID)
			err := s.runLines(ctx, "socket", c, c)
			log.Debug("local client gone", "session", name, "pid", peer.PID, "error", err)
		}()
	}
}

// CountSocket adds the socket's connection counts: open now, accepted,
// and refused by reason (peer: another user's process; limit:
// max_socket_conns).
func (m *Metrics) CountSocket(stats func() localsock.Stats) {
	_ = m.reg.Register(&socketCollector{stats: stats})
}

type socketCollector struct {
	stats func() localsock.Stats
}

var (
	socketOpenDesc = prometheus.NewDesc("pyrun_socket_connections_open",
		"Connections open on the local socket (--socket), each an MCP session of the local client.", nil, nil)
	socketAcceptedDesc = prometheus.NewDesc("pyrun_socket_connections_total",
		"Connections accepted on the local socket.", nil, nil)
	socketRefusedDesc = prometheus.NewDesc("pyrun_socket_connections_refused_total",
		"Connections refused on the local socket, by reason: peer (a process of another user, checked with SO_PEERCRED) or limit (max_socket_conns).",
		[]string{"reason"}, nil)
)

func (c *socketCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- socketOpenDesc
	ch <- socketAcceptedDesc
	ch <- socketRefusedDesc
}

func (c *socketCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(socketOpenDesc, prometheus.GaugeValue, float64(s.Open))
	ch <- prometheus.MustNewConstMetric(socketAcceptedDesc, prometheus.CounterValue, float64(s.Accepted))
	ch <- prometheus.MustNewConstMetric(socketRefusedDesc, prometheus.CounterValue, float64(s.RefusedPeer), "peer")
	ch <- prometheus.MustNewConstMetric(socketRefusedDesc, prometheus.CounterValue, float64(s.RefusedLimits), "limit")
}

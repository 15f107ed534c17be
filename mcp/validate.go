package mcp

import (
	"errors"
	"fmt"
	"time"

	"github.com/pyrun/pyrun/internal/bytesize"
	"github.com/pyrun/pyrun/mcp/flow"
)

// Validate checks the settings of o a user sets (pyrun's flags and config
// keys, docs/configuration.md), each named as the setting is: the code
// and files a call may bring, its live stream, the output store, the
// MCP App's cells, the requests and results pyrun holds, the tasks. What
// o takes from the pools and the runtime (timeout, output caps, network,
// displays, versions, languages) is the supervisor's to check.
func (o Options) Validate() error {
	size := func(name string, v, lo, hi int64) error {
		if v < lo || v > hi {
			return fmt.Errorf("%s must be between %s and %s, not %s", name, bytesize.Format(lo), bytesize.Format(hi), bytesize.Format(v))
		}
		return nil
	}
	count := func(name string, v, lo, hi int) error {
		if v < lo || v > hi {
			return fmt.Errorf("%s must be between %d and %d, not %d", name, lo, hi, v)
		}
		return nil
	}
	switch {
	case o.Live.ProgressInterval < 100*time.Millisecond:
		return fmt.Errorf("progress-interval must be at least 100ms, not %s", o.Live.ProgressInterval)
	case o.Outputs.TTL < time.Second:
		return fmt.Errorf("output-ttl must be at least 1s, not %s", o.Outputs.TTL)
	}
	for _, err := range []error{
		size("max-code", int64(o.MaxCode), 1<<10, 32<<20),
		count("max-input-files", o.MaxInputFiles, 1, 100000),
		size("live-buffer", int64(o.Live.Buffer), 4<<10, 64<<20),
		size("output-store", o.Outputs.MaxBytes, 1<<10, 1<<30),
		count("output-store-files", o.Outputs.MaxFiles, 1, 65536),
		size("app-cell-bytes", max(o.AppCellBytes, 0), 0, 1<<30), // -1: none
		o.Delivery.Validate(),
		o.Tasks.Validate(),
	} {
		if err != nil {
			return err
		}
	}
	req, body := o.Requests, MaxRequestBody(o.MaxCode)
	switch {
	case req.MaxBytes < 0 || req.ClientMaxBytes < 0:
		return errors.New("max-request-bytes and client-max-request-bytes must not be negative")
	case req.ClientMaxBytes != 0 && req.ClientMaxBytes < body:
		return fmt.Errorf("client-max-request-bytes (%s) must be at least the largest request body (%s: twice max-code plus 1MiB, at least 4MiB)",
			bytesize.Format(req.ClientMaxBytes), bytesize.Format(body))
	case req.MaxBytes != 0 && req.MaxBytes < o.RequestLimits().ClientMaxBytes:
		return fmt.Errorf("max-request-bytes (%s) must be at least client-max-request-bytes (%s)",
			bytesize.Format(req.MaxBytes), bytesize.Format(o.RequestLimits().ClientMaxBytes))
	}
	return nil
}

// RequestLimits are the request byte limits in force, a zero one worked
// out from the largest request body: room for two of them per client
// and four clients' worth in all.
func (o Options) RequestLimits() flow.RequestLimits {
	l := o.Requests
	if l.ClientMaxBytes == 0 {
		l.ClientMaxBytes = max(flow.DefaultClientMaxRequestBytes, 2*MaxRequestBody(o.MaxCode))
	}
	if l.MaxBytes == 0 {
		l.MaxBytes = max(flow.DefaultMaxRequestBytes, 4*l.ClientMaxBytes)
	}
	return l
}

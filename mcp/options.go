package mcp

import "github.com/pyrun/pyrun/mcp/apps"

func (o Options) withDefaults() Options {
	if o.MaxCode <= 0 {
		o.MaxCode = 1 << 20
	}
	if o.MaxDisplays <= 0 {
		o.MaxDisplays = 16
	}
	if o.MaxDisplayBytes <= 0 {
		o.MaxDisplayBytes = 4 << 20
	}
	if o.AppCellBytes == 0 {
		o.AppCellBytes = apps.DefaultCellBytes
	}
	o.Requests = o.RequestLimits()
	return o
}

// options returns the options in force.
func (s *Server) options() Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts
}

// SetOptions applies new options, as after a config reload: calls from now
// on use them, and when the tool's description changes (its time limit,
// output cap or network) connected clients are told the tool list changed.
func (s *Server) SetOptions(opts Options) {
	opts = opts.withDefaults()
	s.outputs.SetConfig(opts.Outputs)
	s.front.out.SetLimits(opts.Delivery)
	s.front.bytes.SetLimits(opts.Requests)
	s.tasks.setOptions(opts.Tasks)
	s.cells.SetMax(opts.AppCellBytes)
	s.mu.Lock()
	old := s.opts
	s.opts = opts
	s.mu.Unlock()
	if old.Network != opts.Network {
		s.mu.Lock()
		clear(s.published) // the annotations say whether code reaches the network
		s.mu.Unlock()
	}
	s.republish()
}

// republish gives clients a tool again when its description changed
// (options, or the tools of code mode): the SDK tells connected clients
// that the tool list changed.
func (s *Server) republish() {
	s.mu.Lock()
	opts := s.opts
	var changed []Language
	for _, l := range opts.languages() {
		if desc := languageDescription(l, opts); desc != s.published[l.Tool] {
			s.published[l.Tool] = desc
			changed = append(changed, l)
		}
	}
	s.mu.Unlock()
	for _, l := range changed {
		s.sdk.AddTool(languageToolDef(l, opts), s.handle)
	}
}

// taskOptions are the tasks' bounds in force.
func (s *Server) taskOptions() TaskOptions {
	s.tasks.mu.Lock()
	defer s.tasks.mu.Unlock()
	return s.tasks.opts
}

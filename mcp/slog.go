package mcp

import (
	"context"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// slogFor lets the SDK, which logs through log/slog, log through pyrun's
// hclog logger, so that every line reaches stderr in one format.
func slogFor(log hclog.Logger) *slog.Logger {
	return slog.New(&hclogHandler{log: log})
}

type hclogHandler struct {
	log   hclog.Logger
	attrs []any
}

func (h *hclogHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.log.GetLevel() <= hclogLevel(l)
}

func (h *hclogHandler) Handle(_ context.Context, r slog.Record) error {
	args := append([]any(nil), h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		args = append(args, a.Key, a.Value.Any())
		return true
	})
	h.log.Log(hclogLevel(r.Level), r.Message, args...)
	return nil
}

func (h *hclogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := &hclogHandler{log: h.log, attrs: append([]any(nil), h.attrs...)}
	for _, a := range attrs {
		n.attrs = append(n.attrs, a.Key, a.Value.Any())
	}
	return n
}

func (h *hclogHandler) WithGroup(name string) slog.Handler {
	return &hclogHandler{log: h.log.Named(name), attrs: h.attrs}
}

func hclogLevel(l slog.Level) hclog.Level {
	switch {
	case l < slog.LevelInfo:
		return hclog.Debug
	case l < slog.LevelWarn:
		return hclog.Info
	case l < slog.LevelError:
		return hclog.Warn
	default:
		return hclog.Error
	}
}

package mcp

import (
	"testing"

	"github.com/hashicorp/go-hclog"
)

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Warn, Output: t.Output()})
}

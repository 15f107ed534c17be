package main

import (
	"testing"

	"github.com/pyrun/pyrun/mcp/apps"
	"github.com/pyrun/pyrun/supervisor"
)

// --app-cell-bytes (config app_cell_bytes) reaches the MCP front end: 4MiB
// by default, 0 for none (which mcp.Options spells -1), at most 1GiB.
func TestAppCellBytesFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int64
	}{
		{nil, apps.DefaultCellBytes},
		{[]string{"--app-cell-bytes", "64KiB"}, 64 << 10},
		{[]string{"--app-cell-bytes", "0"}, -1},
	} {
		o, _, err := loadOptions("serve", c.args)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if got := o.frontOptions(&supervisor.Runtime{}).AppCellBytes; got != c.want {
			t.Errorf("%v: AppCellBytes %d, want %d", c.args, got, c.want)
		}
	}
	if _, _, err := loadOptions("serve", []string{"--app-cell-bytes", "2GiB"}); err == nil {
		t.Error("--app-cell-bytes 2GiB accepted")
	}
}

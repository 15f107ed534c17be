package mcp

import (
	"strings"
	"testing"
	"time"
)

// run_r_code's description says what an R user needs beyond the generic
// one: the limits, the JSON forms, plots as images, the packages there are.
func TestRToolDescription(t *testing.T) {
	r := testR
	r.Versions = map[string]string{"r": "4.6.0", "webr": "0.6.0"}
	desc := languageToolDef(r, Options{Timeout: 30 * time.Second, MaxOutput: 65536}).Description
	for _, want := range []string{
		"Run R code", "r 4.6.0, webr 0.6.0", "30s", "data frame as an array of row objects",
		"Plots come back as images", "install.packages() cannot work",
	} {
		if !strings.Contains(desc, want) {
			t.Errorf("run_r_code description lacks %q:\n%s", want, desc)
		}
	}
}

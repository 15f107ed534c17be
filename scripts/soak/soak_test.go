package main

import (
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/testlog"
	"github.com/pyrun/pyrun/internal/testtier"
)

// TestSoakShort is the soak in small: 150 mixed calls from six
// clients while workers are killed from outside. It builds pyrun from this
// module.
func TestSoakShort(t *testing.T) {
	rep := soakTest(t, Config{
		Clients: 6,
		Calls:   150,
		Workers: 2,
		Mix: map[string]int{
			"ok": 60, "error": 15, "stderr": 5, "flood": 4, "timeout": 5, "sleep": 5,
			"c-loop": 1, "memory": 1, "js-memory": 1, "crash": 1, "exit": 1,
		},
	})
	if rep.PeakRSSMiB > 150 {
		t.Errorf("pyrun's peak RSS was %.1f MiB", rep.PeakRSSMiB)
	}
}

// TestSoakLanguages: R and JavaScript calls mixed with Python's on one
// pyrun, while workers of all three are killed from outside: every call is
// answered with its own output and a status of its kind.
func TestSoakLanguages(t *testing.T) {
	rep := soakTest(t, Config{
		Clients:   4,
		Calls:     120,
		Workers:   1,
		Languages: []string{"python", "r", "javascript"},
		Mix: map[string]int{
			"ok": 20, "error": 5, "timeout": 3, "crash": 1,
			"r-ok": 20, "r-error": 6, "r-timeout": 3,
			"js-ok": 20, "js-error": 6, "js-loop": 2, "js-await": 3,
		},
	})
	for _, k := range []string{"r-ok", "js-ok"} {
		if rep.Statuses[k]["success"] == 0 {
			t.Errorf("no %s call succeeded: %v", k, rep.Statuses[k])
		}
	}
}

// soakTest runs a soak of c's clients, calls, workers, languages and mix
// with the tests' common settings (a kill every 8s on average, a 5s
// timeout, 256 MiB of memory, a new seed), logs its report and fails t
// unless all calls were sent and answered, none lost or mixed, each with a
// status of its kind.
func soakTest(t *testing.T, c Config) Report {
	t.Helper()
	testtier.Runtime(t)
	c.KillEvery = 8 * time.Second
	c.Timeout = 5 * time.Second
	c.MemoryLimit = "256MiB"
	c.CallTimeout = 2 * time.Minute
	c.Seed = uint64(time.Now().UnixNano())
	c.Log = testlog.Writer(t)
	rep, err := Run(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Print(&b)
	t.Log("\n" + b.String())
	if calls := int64(c.Calls); rep.Lost != 0 || rep.Mixed != 0 || rep.Answered != rep.Sent || rep.Sent != calls {
		t.Errorf("sent %d, answered %d, lost %d, mixed %d; want all %d answered, none lost or mixed",
			rep.Sent, rep.Answered, rep.Lost, rep.Mixed, calls)
	}
	if rep.Unexpected != 0 {
		t.Errorf("%d calls ended with a status that is not theirs", rep.Unexpected)
	}
	return rep
}

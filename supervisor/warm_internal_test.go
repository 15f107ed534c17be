package supervisor

import (
	"encoding/json"
	"testing"
)

// TestWarmCallsReachTheWorkersThatServeMany: a worker is told to warm up
// (HostConfig warm_calls) unless it serves one call only (a pool worker of
// IsolationProcess), makes a snapshot, or its engine does not warm.
func TestWarmCallsReachTheWorkersThatServeMany(t *testing.T) {
	rt := fakeRuntime(t, "")
	for _, tc := range []struct {
		name   string
		engine Engine
		cfg    Config
		l      launch
		want   int
	}{
		{"pool worker", Python, Config{}, launch{}, DefaultWarmCalls},
		{"pool worker, warm_calls 7", Python, Config{WarmCalls: 7}, launch{}, 7},
		{"pool worker, none", Python, Config{WarmCalls: -1}, launch{}, 0},
		{"pool worker of isolation process", Python, Config{Isolation: IsolationProcess}, launch{}, 0},
		{"session worker of isolation process", Python, Config{Isolation: IsolationProcess}, launch{session: true}, DefaultWarmCalls},
		{"snapshot maker", Python, Config{}, launch{makeSnapshot: true}, 0},
		{"JavaScript worker", JavaScript, Config{}, launch{}, 0},
	} {
		args, err := denoArgs(rt, tc.engine, tc.cfg.forEngine(tc.engine), tc.l)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var hc hostConfig
		if err := json.Unmarshal([]byte(args[len(args)-1]), &hc); err != nil {
			t.Fatalf("%s: the last argument is not the HostConfig: %v", tc.name, err)
		}
		if hc.WarmCalls != tc.want {
			t.Errorf("%s: warm_calls %d, want %d", tc.name, hc.WarmCalls, tc.want)
		}
	}
}

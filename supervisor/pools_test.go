package supervisor_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/supervisor"
)

// Pools send each call to its language's pool, refuse a language they do
// not run, and add up their pools' figures.
func TestPoolsRouteByLanguage(t *testing.T) {
	py := fakePool(t, "echo", supervisor.Config{Workers: 1})
	r := supervisor.NewEnginePoolWithCommand(supervisor.FakeEngine("r"), fakeCommand("echo", "PYRUN_FAKE_ENGINE=r"),
		supervisor.Config{Workers: 2, Deps: []string{"attrs"}, Mounts: []supervisor.Mount{{Host: t.TempDir(), Path: "/data"}}}, testLogger(t))
	supervisor.CloseAtEnd(t, r)
	if got := r.Config().MemoryLimit; got != 256<<20 {
		t.Errorf("r pool memory limit %d, want its engine's default", got)
	}
	// Python's packages and mounts are none of an engine without them:
	// its workers start (and take calls, below) with deps configured.
	if c := r.Config(); c.Deps != nil || c.Mounts != nil {
		t.Errorf("r pool config keeps deps %v and mounts %v", c.Deps, c.Mounts)
	}
	ps, err := supervisor.NewPools(py, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := supervisor.NewPools(py, py); err == nil {
		t.Error("NewPools took two pools of one engine")
	}
	if got := strings.Join(ps.Languages(), ","); got != "python,r" {
		t.Errorf("Languages = %s", got)
	}
	for _, tc := range []struct{ lang, code string }{{"", "1"}, {"python", "2"}, {"r", "3"}, {"r", "4"}} {
		res, err := ps.Run(t.Context(), supervisor.Job{ID: tc.code, Code: tc.code, Language: tc.lang}, nil)
		if err != nil || res.Status != supervisor.StatusSuccess {
			t.Fatalf("%q call: %v %v", tc.lang, res.Status, err)
		}
	}
	byLang := ps.LanguageStats()
	if n := byLang["python"].Counts.Calls["success"]; n != 2 {
		t.Errorf("python pool ran %d calls, want 2", n)
	}
	if n := byLang["r"].Counts.Calls["success"]; n != 2 {
		t.Errorf("r pool ran %d calls, want 2", n)
	}
	if s := ps.Stats(); s.Workers != 3 || s.Counts.Calls["success"] != 4 {
		t.Errorf("summed stats: %d workers, %d calls; want 3 and 4", s.Workers, s.Counts.Calls["success"])
	}
	_, err = ps.Run(t.Context(), supervisor.Job{ID: "5", Code: "5", Language: "javascript"}, nil)
	if !errors.Is(err, supervisor.ErrLanguageOff) || !strings.Contains(err.Error(), "runs python, r, not javascript") {
		t.Errorf("javascript call: %v, want ErrLanguageOff naming the languages", err)
	}
}

// A pool of an engine without globals or tool calls is never sent them.
func TestPoolDropsWhatItsEngineDoesNotTake(t *testing.T) {
	r := supervisor.NewEnginePoolWithCommand(supervisor.FakeEngine("r"), fakeCommand("echo-request", "PYRUN_FAKE_ENGINE=r"),
		supervisor.Config{Workers: 1}, testLogger(t))
	supervisor.CloseAtEnd(t, r)
	res, err := r.Run(t.Context(), supervisor.Job{ID: "1", Code: "x", Globals: json.RawMessage(`{"a":1}`),
		Catalog: json.RawMessage(`{"tools":[]}`)}, nil)
	if err != nil || res.Status != supervisor.StatusSuccess {
		t.Fatalf("call: %v %v", res.Status, err)
	}
	var req map[string]any
	if err := json.Unmarshal([]byte(res.Value), &req); err != nil {
		t.Fatalf("value %q: %v", res.Value, err)
	}
	if _, ok := req["globals"]; ok {
		t.Errorf("the r worker was sent globals: %v", req)
	}
	if _, ok := req["tools"]; ok {
		t.Errorf("the r worker was sent tools: %v", req)
	}
	if req["code"] != "x" {
		t.Errorf("request %v lacks the code", req)
	}
}

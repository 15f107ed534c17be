package main

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pyrun/pyrun/lang"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/oswall"
	"github.com/pyrun/pyrun/supervisor/packages"
)

// TestLimits checks that the request limits reach what a client sees: code
// and globals size (--max-code), the cap on timeout_seconds (--timeout) and
// output (--max-output). The queue's limits are the pool's
// (supervisor.TestQueueIsBounded); TestLimitFlags checks that they get there.
func TestLimits(t *testing.T) {
	s := newServer(t, "--workers", "1", "--max-code", "2KiB", "--timeout", "2s", "--max-output", "1KiB")

	toolError := func(t *testing.T, args map[string]any, want ...string) {
		t.Helper()
		res, err := s.callRaw(t.Context(), args)
		if err != nil {
			t.Fatalf("a protocol error, want a tool error: %v", err)
		}
		var text strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				text.WriteString(tc.Text)
			}
		}
		if !res.IsError {
			t.Fatalf("isError false: %s", text.String())
		}
		for _, w := range want {
			if !strings.Contains(text.String(), w) {
				t.Errorf("the error does not mention %q: %s", w, text.String())
			}
		}
	}

	t.Run("code size", func(t *testing.T) {
		toolError(t, map[string]any{"python_code": "x = 1\n" + strings.Repeat("#", 3<<10)}, "python_code", "2048", "max_code")
		wantValue(t, s.run(t, "x = 1\n#"+strings.Repeat("#", 1<<10)+"\nx"), "1")
	})

	t.Run("globals size", func(t *testing.T) {
		toolError(t, map[string]any{"python_code": "1", "global_variables": map[string]any{"big": strings.Repeat("y", 3<<10)}},
			"global_variables", "2048", "max_code")
	})

	t.Run("timeout_seconds is capped", func(t *testing.T) {
		start := time.Now()
		r := s.mustCall(t, map[string]any{"python_code": "while True:\n    pass", "timeout_seconds": 3600})
		wantStatus(t, r, "timeout")
		if took := time.Since(start); took < 2*time.Second || took > 15*time.Second {
			t.Errorf("a call asking for an hour under --timeout 2s took %s", took)
		}
		if !strings.Contains(*r.sc.Error, "time limit of 2s") {
			t.Errorf("error %q does not name the 2s limit", *r.sc.Error)
		}
	})

	t.Run("a tiny timeout_seconds is rounded up to 0.1", func(t *testing.T) {
		// 1e-10 used to read as no limit of its own (the full --timeout),
		// 1e-7 as one that passed before the worker read the call (crashed).
		for _, tiny := range []float64{1e-10, 1e-7} {
			r := s.mustCall(t, map[string]any{"python_code": "import time\ntime.sleep(1.5)", "timeout_seconds": tiny})
			wantStatus(t, r, "timeout")
			if !strings.Contains(*r.sc.Error, "time limit of 100ms") {
				t.Errorf("timeout_seconds %g: error %q does not name the 100ms minimum", tiny, *r.sc.Error)
			}
		}
		wantValue(t, s.mustCall(t, map[string]any{"python_code": "40 + 2", "timeout_seconds": 1e-7}), "42")
	})

	t.Run("output", func(t *testing.T) {
		r := s.run(t, "print('x' * 5000)\nraise ValueError('e' * 5000)")
		if len(r.sc.Stdout) > 1<<10+200 || !strings.Contains(r.sc.Stdout, "cut here") {
			t.Errorf("stdout is %d bytes: %.200q", len(r.sc.Stdout), r.sc.Stdout)
		}
		if len(*r.sc.Error) > 1<<10+200 || !strings.Contains(*r.sc.Error, "cut here") {
			t.Errorf("error is %d bytes: %.200q", len(*r.sc.Error), *r.sc.Error)
		}
		r = s.run(t, "'v' * 5000")
		var v string
		if err := json.Unmarshal(r.sc.ReturnValue, &v); err != nil || len(v) > 1<<10+200 || !strings.Contains(v, "cut here") {
			t.Errorf("return value %.200s (%v)", r.sc.ReturnValue, err)
		}
	})
}

// TestLimitFlags checks that each limit's flag and config key reaches the
// pool and the front end.
func TestLimitFlags(t *testing.T) {
	cfgFile := t.TempDir() + "/pyrun.json"
	if err := writeFile(cfgFile, `{"max_queue": 5, "queue_timeout": "3s", "memory_limit": "300MiB", "worker_log_rate": "32KiB", "idle_cpu": 0.2, "warm_calls": 50, "worker_open_files": 512, "client_max_workers": 3, "client_worker_idle": "2m", "max_checkpoint": "64MiB", "restore_spares": 2}`); err != nil {
		t.Fatal(err)
	}
	o, _, err := loadOptions("stdio", []string{"--config", cfgFile, "--timeout", "7s", "--max-output", "2KiB", "--max-code", "4KiB",
		"--max-worker-threads", "32", "--idle-memory-slack", "100MiB", "--worker-log-per-call", "8KiB",
		"--worker-file-size", "64MiB", "--os-sandbox", "required", "--session-store", "dir:" + t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	got := o.poolConfig(lang.Python)
	want := supervisor.Config{Workers: got.Workers, Timeout: 7 * time.Second, MemoryLimit: 300 << 20, MaxOutput: 2 << 10,
		MaxQueue: 5, QueueTimeout: 3 * time.Second, Network: supervisor.NetworkPublic, Isolation: supervisor.IsolationCall, PyPI: packages.DefaultPyPI,
		MaxDisplays: 16, MaxDisplayBytes: 4 << 20, MaxFiles: 256, MaxFileBytes: 64 << 20,
		ClientMaxWorkers: 3, ClientWorkerIdle: 2 * time.Minute,
		MaxWorkerThreads: 32, IdleCPU: 0.2, IdleMemorySlack: 100 << 20, StderrLogPerCall: 8 << 10, StderrLogRate: 32 << 10, WarmCalls: 50,
		OSSandbox: oswall.ModeRequired, WorkerOpenFiles: 512, WorkerFileSize: 64 << 20,
		Checkpoints: true, MaxCheckpoint: 64 << 20, RestoreSpares: 2}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pool config %+v, want %+v", got, want)
	}
	// --warm-calls 0 is none, which the pool's Config spells -1.
	if o, _, err := loadOptions("stdio", []string{"--warm-calls", "0"}); err != nil || o.poolConfig(lang.Python).WarmCalls != -1 {
		t.Errorf("--warm-calls 0: %v, WarmCalls %d, want -1", err, o.poolConfig(lang.Python).WarmCalls)
	}
	if o.mcp.MaxCode != 4<<10 {
		t.Errorf("max code %d, want 4KiB", o.mcp.MaxCode)
	}
	for _, bad := range [][]string{
		{"--max-code", "100"}, {"--max-code", "1GiB"}, {"--timeout", "0s"}, {"--memory-limit", "64MiB"},
		{"--max-output", "10"}, {"--max-queue", "-1"}, {"--queue-timeout", "0s"},
		{"--max-displays", "0"}, {"--max-display-bytes", "10"}, {"--output-ttl", "0s"}, {"--output-store", "1"},
		{"--output-store-files", "0"}, {"--mount", "/nonexistent-pyrun:/data"}, {"--mount", t.TempDir() + ":relative"},
		{"--mount", t.TempDir() + ":/tmp"}, {"--mount", t.TempDir() + ":/data:rx"},
		{"--mount", t.TempDir() + ":/home/web_user/data"}, {"--mount", t.TempDir() + ":/usr/lib/R"},
		{"--max-worker-threads", "4"}, {"--idle-cpu", "0"}, {"--idle-cpu", "2"}, {"--idle-memory-slack", "-1"},
		{"--worker-log-per-call", "10"}, {"--worker-log-rate", "1GiB"}, {"--warm-calls", "-1"}, {"--warm-calls", "20000"},
		{"--client-max-workers", "-1"}, {"--client-worker-idle", "0s"}, {"--metrics-max-clients", "0"}, {"--restore-spares", "5"},
		{"--restore-spares", "-1"}, {"--session-spares", "-1"}, {"--session-spares", "17"}, {"--max-checkpoint", "1MiB"},
		{"--mount", t.TempDir() + ":/data," + t.TempDir() + ":/data"},
		{"--max-conns", "-1"}, {"--max-conns-per-addr", "0"}, {"--max-socket-conns", "0"}, {"--client-max-calls", "5000"},
		{"--client-max-queue", "-1"}, {"--session-timeout", "0s"}, {"--keep-alive", "-1s"}, {"--max-mcp-sessions", "0"},
		{"--header-timeout", "50ms"}, {"--body-timeout", "0s"}, {"--auth-jwks-url", "https://idp.example/jwks"},
		{"--auth-audience", "pyrun"}, {"--go-memory-limit", "1MiB"},
	} {
		if _, _, err := loadOptions("stdio", bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }

// A count whose 0 means none reaches its part as the part spells none
// (-1; its own 0 is its default), and is written back as 0: the reload
// compares and keeps settings in flag syntax.
func TestNoneFlags(t *testing.T) {
	o, _, err := loadOptions("stdio", []string{"--warm-calls", "0", "--restore-spares", "0", "--session-spares", "0", "--app-cell-bytes", "0"})
	if err != nil {
		t.Fatal(err)
	}
	if o.supervisor.WarmCalls != -1 || o.supervisor.RestoreSpares != -1 || o.sessions.Limits.Spares != -1 || o.mcp.AppCellBytes != -1 {
		t.Errorf("0 for none: warm %d, restore spares %d, session spares %d, app cells %d; want -1 each",
			o.supervisor.WarmCalls, o.supervisor.RestoreSpares, o.sessions.Limits.Spares, o.mcp.AppCellBytes)
	}
	set := o.settings()
	for _, name := range []string{"warm-calls", "restore-spares", "session-spares", "app-cell-bytes"} {
		if set[name] != "0" {
			t.Errorf("%s is written %q, want 0", name, set[name])
		}
	}
	o, _, err = loadOptions("stdio", []string{"--restore-spares", "3", "--app-cell-bytes", "64KiB"})
	if err != nil || o.supervisor.RestoreSpares != 3 || o.mcp.AppCellBytes != 64<<10 || o.settings()["app-cell-bytes"] != "64KiB" {
		t.Errorf("restore-spares 3, app-cell-bytes 64KiB: %v, %d, %d", err, o.supervisor.RestoreSpares, o.mcp.AppCellBytes)
	}
	_, _, err = loadOptions("stdio", []string{"--session-spares", "-2"})
	if err == nil || !strings.Contains(err.Error(), "--session-spares -2: must be between 0 (none) and 16") {
		t.Errorf("--session-spares -2: %v", err)
	}
}

// A reload keeps the mounts pyrun started with, once each.
func TestReloadKeepsMounts(t *testing.T) {
	dir := t.TempDir()
	old, _, err := loadOptions("serve", []string{"--mount", dir + ":/data"})
	if err != nil {
		t.Fatal(err)
	}
	o, _, err := loadOptions("serve", nil)
	if err != nil {
		t.Fatal(err)
	}
	o.keepRestartOnly(old)
	if len(o.supervisor.Mounts) != 1 || o.supervisor.Mounts[0].Path != "/data" {
		t.Errorf("mounts after the reload: %+v, want %s at /data once", o.supervisor.Mounts, dir)
	}
	o.keepRestartOnly(old)
	if len(o.supervisor.Mounts) != 1 {
		t.Errorf("mounts after a second reload: %+v", o.supervisor.Mounts)
	}
}

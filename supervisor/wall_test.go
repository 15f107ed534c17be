package supervisor_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyrun/pyrun/internal/testruntime"
	"github.com/pyrun/pyrun/supervisor"
	"github.com/pyrun/pyrun/supervisor/oswall"
)

// wallAttempts is Python that, on a worker whose first wall is open
// (supervisor.OpenFirstWall: every Deno permission, FFI included), tries
// through Deno what the second wall must refuse, and records what each
// attempt gave in out.
const wallAttempts = `
import js, json
from pyodide.code import run_js
attempt("read a host file", lambda: js.Deno.readTextFileSync(secret_file))
attempt("read /etc/passwd", lambda: js.Deno.readTextFileSync("/etc/passwd"))
attempt("list the home folder", lambda: [e.name for e in js.Deno.readDirSync(home)])
attempt("write a host file", lambda: js.Deno.writeTextFileSync(write_dir + "/written", "x"))
attempt("write Deno's cache", lambda: js.Deno.writeTextFileSync(deno_dir + "/written-by-a-worker", "x"))
attempt("start a process", lambda: bytes(run_js("new Deno.Command('/bin/sh', {args: ['-c', 'echo ran']}).outputSync()").stdout.to_py()).decode())
await await_attempt("connect to loopback", run_js("""async (port) => {
  const c = await Deno.connect({hostname: "127.0.0.1", port});
  c.close();
  return "connected";
}""")(port))
# System calls through FFI (libc's syscall()): "ok N" or "errno N".
syscalls = run_js("""(target) => {
  const libc = Deno.dlopen("libc.so.6", {
    syscall: {parameters: ["i64", "i64", "i64", "i64", "i64", "i64"], result: "i64"},
    __errno_location: {parameters: [], result: "pointer"},
  });
  const sys = (...a) => {
    while (a.length < 6) a.push(0);
    const r = libc.symbols.syscall(...a.map(BigInt));
    if (Number(r) !== -1) return "ok " + r;
    return "errno " + new Deno.UnsafePointerView(libc.symbols.__errno_location()).getInt32();
  };
  // Attach to a child of its own where it can start one (ptrace_scope
  // 1 allows descendants), else to the test's process.
  let child = null;
  try { child = new Deno.Command("sleep", {args: ["30"]}).spawn(); target = child.pid; } catch {}
  const out = {ptrace: sys(101, 16, target)}; // PTRACE_ATTACH
  if (out.ptrace.startsWith("ok")) sys(101, 17, target); // PTRACE_DETACH
  out.process_vm_readv = sys(310, target, 0, 0, 0, 0);
  out.unshare = sys(272, 0x04000000); // CLONE_NEWUTS
  out.mount = sys(165, 0, 0, 0, 0, 0);
  out.bpf = sys(321, 0, 0, 0);
  out.userfaultfd = sys(323, 0);
  out.io_uring_setup = sys(425, 0, 0);
  out.unix_socket = sys(41, 1, 1, 0); // socket(AF_UNIX, SOCK_STREAM)
  out.clone3 = sys(435, 0, 0);
  if (child) child.kill("SIGKILL");
  return JSON.stringify(out);
}""")
attempt("syscalls", lambda: syscalls(target))
`

// TestSecondWall is docs/contract.md section 15's proof: workers whose first wall is open
// (every Deno permission) still cannot, with the second wall up, read a
// host file outside their runtime, write anywhere, start a process,
// ptrace, make the system calls the filter refuses, or reach the network
// under --network none. With it off (the control) the same code does each
// of those, so the refusals are the second wall's.
func TestSecondWall(t *testing.T) {
	rt := testruntime.Get(t)
	secretFile := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secretFile, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	target := exec.Command("sleep", "60")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Process.Kill(); target.Wait() })
	t.Cleanup(func() { os.Remove(filepath.Join(rt.DenoDir, "written-by-a-worker")) })

	attempts := func(t *testing.T, mode oswall.Mode, writeDir string) map[string]string {
		cfg := supervisor.OpenFirstWall(supervisor.Config{Workers: 1, Network: supervisor.NetworkNone, OSSandbox: mode})
		p := realPool(t, cfg)
		res := hostileRun(t, p, attemptPrelude+wallAttempts+"\nout", map[string]any{
			"secret_file": secretFile, "home": home, "write_dir": writeDir, "deno_dir": rt.DenoDir,
			"port": ln.Addr().(*net.TCPAddr).Port, "target": target.Process.Pid,
		}, 60*time.Second)
		if res.Status != supervisor.StatusSuccess {
			t.Fatalf("status %s: %s\nstdout: %s", res.Status, res.Error, res.Stdout)
		}
		var out map[string]string
		if err := json.Unmarshal([]byte(res.Value), &out); err != nil {
			t.Fatalf("value %q: %v", res.Value, err)
		}
		t.Logf("%s: %v", mode, out)
		return out
	}
	syscalls := func(t *testing.T, out map[string]string) map[string]string {
		var calls map[string]string
		s, _ := strings.CutPrefix(out["syscalls"], "ok: ")
		if err := json.Unmarshal([]byte(s), &calls); err != nil {
			t.Fatalf("syscalls: %q: %v", out["syscalls"], err)
		}
		return calls
	}

	t.Run("wall", func(t *testing.T) {
		writeDir := t.TempDir()
		out := attempts(t, oswall.ModeRequired, writeDir)
		for _, what := range []string{"read a host file", "read /etc/passwd", "list the home folder", "write a host file", "write Deno's cache"} {
			if !strings.Contains(out[what], "PermissionDenied") {
				t.Errorf("%s: %s; want Landlock's refusal (PermissionDenied)", what, out[what])
			}
		}
		if !strings.Contains(out["start a process"], "PermissionDenied") {
			t.Errorf("start a process: %s; want seccomp's refusal", out["start a process"])
		}
		if strings.HasPrefix(out["connect to loopback"], "ok") {
			t.Errorf("connect to loopback: %s", out["connect to loopback"])
		}
		if entries, _ := os.ReadDir(writeDir); len(entries) > 0 {
			t.Errorf("the worker wrote into %s", writeDir)
		}
		calls := syscalls(t, out)
		for call, want := range map[string]string{
			"ptrace": "errno 1", "process_vm_readv": "errno 1", "unshare": "errno 1", "mount": "errno 1", "bpf": "errno 1",
			"userfaultfd": "errno 1", "io_uring_setup": "errno 1", "unix_socket": "errno 1", "clone3": "errno 38",
		} {
			if calls[call] != want {
				t.Errorf("%s: %s; want %s", call, calls[call], want)
			}
		}
	})

	t.Run("control", func(t *testing.T) {
		writeDir := t.TempDir()
		out := attempts(t, oswall.ModeOff, writeDir)
		for what, want := range map[string]string{
			"read a host file": "ok: host secret", "read /etc/passwd": "ok: root:", "list the home folder": "ok: [",
			"write a host file": "ok", "start a process": "ok: ran", "connect to loopback": "ok: connected",
		} {
			if !strings.HasPrefix(out[what], want) {
				t.Errorf("%s: %s; want %s (the open first wall lets it through)", what, out[what], want)
			}
		}
		if _, err := os.Stat(filepath.Join(writeDir, "written")); err != nil {
			t.Errorf("the worker did not write into %s: %v", writeDir, err)
		}
		select {
		case <-accepted:
		case <-time.After(5 * time.Second):
			t.Error("the listener saw no connection")
		}
		if calls := syscalls(t, out); calls["ptrace"] != "ok 0" {
			t.Errorf("ptrace: %s; want ok 0", calls["ptrace"])
		}
	})
}

// procStatus reads the fields of /proc/PID/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// TestSecondWallLayers checks, from outside, the layers a worker process
// runs under: no_new_privs, a seccomp filter, no capabilities, SIGXFSZ
// ignored (a file past --worker-file-size fails to write instead of
// killing the worker), the resource limits, and a network namespace of its
// own exactly when it may reach no network (Python under --network none;
// JavaScript always). Every worker of the real pools the other tests start
// is made the same way (workerCmd); so is the snapshot maker, which
// TestSnapshotMakerBehindTheWall runs.
func TestSecondWallLayers(t *testing.T) {
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		engine   supervisor.Engine
		network  supervisor.Network
		ownNetNS bool
	}{
		{"python, network none", supervisor.Python, supervisor.NetworkNone, true},
		{"python, network public", supervisor.Python, supervisor.NetworkPublic, false},
		{"javascript", supervisor.JavaScript, supervisor.NetworkPublic, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := supervisor.Config{Workers: 1, Network: tc.network, OSSandbox: oswall.ModeRequired, WorkerOpenFiles: 512}
			p, err := supervisor.NewEnginePool(testruntime.Get(t), tc.engine, cfg, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			supervisor.CloseAtEnd(t, p)
			waitReady(t, p, 1)
			pid := p.WorkerPIDs()[0]
			st := procStatus(t, pid)
			for k, want := range map[string]string{"NoNewPrivs": "1", "Seccomp": "2", "CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapBnd": "0000000000000000"} {
				if st[k] != want {
					t.Errorf("%s: %s, want %s", k, st[k], want)
				}
			}
			if ign, err := strconv.ParseUint(st["SigIgn"], 16, 64); err != nil || ign&(1<<24) == 0 { // SIGXFSZ is 25
				t.Errorf("SIGXFSZ is not ignored: SigIgn %s", st["SigIgn"])
			}
			limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				"Max core file size        0                    0",
				fmt.Sprintf("Max file size             %-20d %-20d", oswall.DefaultFileSize, oswall.DefaultFileSize),
				"Max open files            512                  512",
			} {
				if !strings.Contains(string(limits), want) {
					t.Errorf("/proc/%d/limits lacks %q:\n%s", pid, want, limits)
				}
			}
			ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
			if err != nil {
				t.Fatal(err)
			}
			if (ns != own) != tc.ownNetNS {
				t.Errorf("network namespace %s, pyrun's %s; want one of its own: %v", ns, own, tc.ownNetNS)
			}
		})
	}
}

// TestSnapshotMakerBehindTheWall makes a memory snapshot with the OS
// sandbox required: the maker runs behind it and its snapshot works.
func TestSnapshotMakerBehindTheWall(t *testing.T) {
	rt := ownSnapshots(t)
	cfg := supervisor.Config{Workers: 1, OSSandbox: oswall.ModeRequired}
	snap, err := supervisor.EnsureSnapshot(t.Context(), rt, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Built {
		t.Fatalf("snapshot %+v, want one just made", snap)
	}
	p := snapshotPool(t, rt, cfg)
	if res := run(t, p, supervisor.Job{Code: "6 * 7"}); res.Value != "42" {
		t.Errorf("call: %+v", res)
	}
	if s := p.Stats().Counts.Starts; s["snapshot"] != 1 {
		t.Errorf("starts %v, want 1 from the snapshot", s)
	}
}

// TestCachePrimer starts pools on an empty Deno cache: behind the OS
// sandbox a primer fills it once (workers may only read it), and the
// marker it leaves keeps the next pool from priming again; without the
// sandbox's Landlock layer, workers fill it themselves and no primer runs.
func TestCachePrimer(t *testing.T) {
	for _, mode := range []oswall.Mode{oswall.ModeRequired, oswall.ModeOff} {
		t.Run(string(mode), func(t *testing.T) {
			rt := *testruntime.Get(t)
			rt.DenoDir = t.TempDir()
			cfg := supervisor.Config{Workers: 1, OSSandbox: mode}
			for range 2 {
				p, err := supervisor.NewEnginePool(&rt, supervisor.JavaScript, cfg, testLogger(t))
				if err != nil {
					t.Fatal(err)
				}
				waitReady(t, p, 1)
				if err := p.Close(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			_, err := os.Stat(supervisor.PrimedMarker(&rt, supervisor.JavaScript))
			if primed := err == nil; primed != (mode == oswall.ModeRequired) {
				t.Errorf("primed: %v (%v)", primed, err)
			}
			st, err := os.Stat(filepath.Join(rt.DenoDir, "v8_code_cache_v2"))
			if err != nil || st.Size() == 0 {
				t.Errorf("Deno's cache was not filled: %v", err)
			}
		})
	}
}

// TestWorkerFileLimits checks the resource limits the OS sandbox sets
// (--worker-file-size, --worker-open-files) from Python: a write past the
// file size limit and an open past the open files limit fail in the call,
// as OSErrors, and the worker goes on serving.
func TestWorkerFileLimits(t *testing.T) {
	ro, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "in.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := realPool(t, supervisor.Config{
		Workers: 1, Network: supervisor.NetworkNone, OSSandbox: oswall.ModeRequired,
		WorkerFileSize: 1 << 20, WorkerOpenFiles: 256,
		Mounts: []supervisor.Mount{{Host: ro, Path: "/data"}, {Host: rw, Path: "/scratch", RW: true}},
	})
	res := run(t, p, supervisor.Job{Code: `
import errno
out = {}
try:
    with open("/scratch/big", "wb") as f:
        f.write(b"x" * (2 << 20))
    out["write"] = "ok"
except OSError as e:
    out["write"] = errno.errorcode.get(e.errno, str(e.errno))
files = []
try:
    for _ in range(1000):
        files.append(open("/data/in.txt"))
    out["open"] = "ok"
except OSError as e:
    out["open"] = errno.errorcode.get(e.errno, str(e.errno))
out["opened"] = len(files)
for f in files:
    f.close()
out`})
	if res.Status != supervisor.StatusSuccess {
		t.Fatalf("status %s: %s", res.Status, res.Error)
	}
	var out struct {
		Write, Open string
		Opened      int
	}
	if err := json.Unmarshal([]byte(res.Value), &out); err != nil {
		t.Fatalf("%s: %v", res.Value, err)
	}
	if out.Write != "EFBIG" {
		t.Errorf("a 2 MiB write under a 1 MiB limit: %s, want EFBIG", out.Write)
	}
	if st, err := os.Stat(filepath.Join(rw, "big")); err != nil || st.Size() > 1<<20 {
		t.Errorf("the file on the host: %v, %v bytes; want at most 1 MiB", err, st.Size())
	}
	if out.Open != "EMFILE" || out.Opened < 100 || out.Opened >= 256 {
		t.Errorf("opening 1000 files under a limit of 256: %s after %d, want EMFILE after 100-255", out.Open, out.Opened)
	}
	if res := run(t, p, supervisor.Job{Code: "open('/data/in.txt').read()"}); res.Value != `"x"` {
		t.Errorf("the next call on the same worker: %s %s %s", res.Status, res.Value, res.Error)
	}
	if s := p.Stats().Counts.Restarts; len(s) != 0 {
		t.Errorf("restarts %v, want none", s)
	}
}

// TestRWorkerFileSizeLimit: R's worker, too, survives a write past
// --worker-file-size into a :rw mount, and the file stops at the limit.
// (R's writeBin does not report the short write: the call succeeds.)
func TestRWorkerFileSizeLimit(t *testing.T) {
	rw := t.TempDir()
	p, err := supervisor.NewEnginePool(testruntime.Get(t), supervisor.R, supervisor.Config{
		Workers: 1, OSSandbox: oswall.ModeRequired, WorkerFileSize: 1 << 20,
		Mounts: []supervisor.Mount{{Host: rw, Path: "/scratch", RW: true}},
	}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	supervisor.CloseAtEnd(t, p)
	res := run(t, p, supervisor.Job{Code: `writeBin(raw(2 * 1024 * 1024), "/scratch/big")`})
	if res.Status == supervisor.StatusCrashed {
		t.Errorf("the write past the limit ended the worker: %s", res.Error)
	}
	if st, err := os.Stat(filepath.Join(rw, "big")); err != nil || st.Size() > 1<<20 {
		t.Errorf("the file on the host: %v, %v; want at most 1 MiB", err, st)
	}
	if res := run(t, p, supervisor.Job{Code: "1 + 1"}); res.Status != supervisor.StatusSuccess {
		t.Errorf("the next call: %s %s %s", res.Status, res.Value, res.Error)
	}
	if s := p.Stats().Counts.Restarts; len(s) != 0 {
		t.Errorf("restarts %v, want none", s)
	}
}

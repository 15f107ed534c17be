package supervisor

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/pyrun/pyrun/supervisor/oswall"
)

// TestEveryDenoProcessIsWalled checks the commands of every kind of Deno
// process pyrun starts, for every engine: each is the OS sandbox's
// launcher, with every layer this machine offers, a policy that reads the
// runtime and what the Deno flags grant, writes only :rw mounts (and
// Deno's cache for the two kinds that run no code of a call), and has the
// network only where Deno's flags give it; with --os-sandbox off, Deno
// itself.
func TestEveryDenoProcessIsWalled(t *testing.T) {
	rt := realRuntime(t)
	snap := &Snapshot{Path: rt.SnapshotDir + "/k.snap", Size: 123}
	mountRO, mountRW := t.TempDir(), t.TempDir()
	for _, e := range Engines() {
		for name, l := range map[string]launch{
			"plain worker": {}, "snapshot worker": {snapshot: snap}, "snapshot maker": {makeSnapshot: true},
			"session worker": {session: true}, "cache primer": {primeCache: true},
		} {
			if l.makeSnapshot && !e.Features().Snapshots {
				continue
			}
			for _, network := range []Network{NetworkNone, NetworkPublic} {
				cfg := Config{Network: network, Mounts: []Mount{{Host: mountRO, Path: "/mnt/ro"}, {Host: mountRW, Path: "/mnt/rw", RW: true}}}.forEngine(e)
				cmd := exec.Command(rt.Deno)
				if err := workerCmd(cmd, rt, e, cfg, l); err != nil {
					t.Fatalf("%s %s: %v", e.Name(), name, err)
				}
				what := e.Name() + " " + name + " " + string(network)
				if cmd.Path != "/proc/self/exe" || cmd.Args[0] != "pyrun-oswall" || len(cmd.Env) != 1 {
					t.Fatalf("%s: %s %q %q: not the OS sandbox's launcher", what, cmd.Path, cmd.Args, cmd.Env)
				}
				var got struct {
					oswall.Policy
					Path string   `json:"path"`
					Args []string `json:"args"`
				}
				if err := json.Unmarshal([]byte(strings.TrimPrefix(cmd.Env[0], "PYRUN_OSWALL=")), &got); err != nil {
					t.Fatal(err)
				}
				if got.Layers != (oswall.Set{Base: true, Seccomp: true, Landlock: true, NetNS: true}) {
					t.Errorf("%s: layers %+v", what, got.Layers)
				}
				if got.Path != rt.Deno || got.Args[0] != rt.Deno || got.Args[1] != "run" {
					t.Errorf("%s: runs %s %q", what, got.Path, got.Args)
				}
				wantNet := e == Python && network == NetworkPublic && !l.makeSnapshot
				if got.Network != wantNet {
					t.Errorf("%s: network %v, want %v", what, got.Network, wantNet)
				}
				if wantNet != slices.ContainsFunc(got.Args, func(a string) bool { return strings.HasPrefix(a, "--allow-net") }) {
					t.Errorf("%s: network %v, Deno's flags %q", what, got.Network, got.Args)
				}
				for _, p := range []string{rt.Dir, mountRO} {
					if !l.makeSnapshot && !slices.Contains(got.Read, p) {
						t.Errorf("%s: cannot read %s", what, p)
					}
				}
				wantWrite := []string{"/dev/null"}
				if !l.makeSnapshot {
					wantWrite = []string{mountRW, "/dev/null"}
				}
				if l.makeSnapshot || l.primeCache {
					wantWrite = append(wantWrite, rt.DenoDir)
				}
				if !slices.Equal(got.Write, wantWrite) {
					t.Errorf("%s: writes %q, want %q", what, got.Write, wantWrite)
				}
				if !slices.Contains(got.Exec, rt.Deno) || len(got.Exec) != 2 {
					t.Errorf("%s: executes %q, want Deno and its loader", what, got.Exec)
				}
			}
		}
	}
	cmd := exec.Command(rt.Deno)
	if err := workerCmd(cmd, rt, Python, Config{OSSandbox: oswall.ModeOff}.withDefaults(), launch{}); err != nil {
		t.Fatal(err)
	}
	if cmd.Path != rt.Deno || cmd.Args[0] != rt.Deno {
		t.Errorf("--os-sandbox off: %s %q, want Deno itself", cmd.Path, cmd.Args)
	}
}

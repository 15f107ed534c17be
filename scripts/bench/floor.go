//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pyrun/pyrun/supervisor"
)

// floorScript is the least a Deno process can do to run Python for a
// supervisor: Pyodide on the main thread, one JSON request per stdin line
// (`{"id", "code"}`), runPython, and one JSON answer per stdout line with
// what the code printed. No isolation between calls, no interrupts, no
// limits: the round trip pyrun's worker cannot go below.
const floorScript = `import { loadPyodide } from "PYODIDE/pyodide.mjs";

console.log = console.info = console.debug = console.error;
const py = await loadPyodide({ indexURL: "PYODIDE/", stdout: () => {}, stderr: () => {} });
let out = "";
py.setStdout({ batched: (s) => { out += s + "\n"; } });
const enc = new TextEncoder();
const dec = new TextDecoder();
const write = (v) => {
  const b = enc.encode(JSON.stringify(v) + "\n");
  let off = 0;
  while (off < b.length) off += Deno.stdout.writeSync(b.subarray(off));
};
write({ ready: true });
let buf = "";
for await (const chunk of Deno.stdin.readable) {
  buf += dec.decode(chunk, { stream: true });
  for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
    const req = JSON.parse(buf.slice(0, i));
    buf = buf.slice(i + 1);
    out = "";
    py.runPython(req.code);
    write({ id: req.id, stdout: out });
  }
}
`

// floorProc is a running floor script.
type floorProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startFloor(ctx context.Context, rt *supervisor.Runtime) (*floorProc, func(), error) {
	dir, err := os.MkdirTemp("", "pyrun-bench-floor-")
	if err != nil {
		return nil, nil, err
	}
	pyodide := filepath.Join(rt.Dir, "node_modules", "pyodide")
	script := filepath.Join(dir, "floor.js")
	if err := os.WriteFile(script, []byte(strings.ReplaceAll(floorScript, "PYODIDE", pyodide)), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	cmd := exec.CommandContext(ctx, rt.Deno, "run", "--no-prompt", "--cached-only", "--no-config", "--quiet",
		"--allow-read="+pyodide+","+script, script)
	cmd.Env = []string{"DENO_DIR=" + filepath.Join(dir, "deno"), "DENO_NO_UPDATE_CHECK=1", "NO_COLOR=1"}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("start the floor: %w", err)
	}
	f := &floorProc{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	stop := func() {
		stdin.Close()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	var ready struct{ Ready bool }
	line, err := f.out.ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &ready) != nil || !ready.Ready {
		stop()
		return nil, nil, fmt.Errorf("the floor did not start: %v %q", err, line)
	}
	return f, stop, nil
}

// call runs code and returns what it printed.
func (f *floorProc) call(id int, code string) (string, error) {
	req, _ := json.Marshal(map[string]any{"id": id, "code": code})
	if _, err := f.stdin.Write(append(req, '\n')); err != nil {
		return "", err
	}
	line, err := f.out.ReadBytes('\n')
	if err != nil {
		return "", err
	}
	var ans struct {
		ID     int    `json:"id"`
		Stdout string `json:"stdout"`
	}
	if err := json.Unmarshal(line, &ans); err != nil || ans.ID != id {
		return "", fmt.Errorf("floor answered %q to call %s", line, strconv.Itoa(id))
	}
	return ans.Stdout, nil
}

// benchFloor measures round trips of code, which must print want, through
// the floor script, and the floor process's CPU time per call, in
// microseconds.
func benchFloor(ctx context.Context, rt *supervisor.Runtime, code, want string, n, warmup int) (sample, float64, error) {
	f, stop, err := startFloor(ctx, rt)
	if err != nil {
		return sample{}, 0, err
	}
	defer stop()
	var before time.Duration
	s, err := measure(n, warmup, func(i int) error {
		if i == warmup {
			before, _ = cpuTime(f.cmd.Process.Pid)
		}
		out, err := f.call(i, code)
		if err == nil && out != want {
			err = fmt.Errorf("floor printed %q", out)
		}
		return err
	})
	after, _ := cpuTime(f.cmd.Process.Pid)
	return s, perCallUS(after-before, n), err
}

package supervisor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// R is the engine of R in webR (R compiled to WebAssembly):
// pyodide-host/webr/main.ts and the files next to it
// (docs/protocol.md, "Engines: R").
var R Engine = rEngine{}

// rEngine takes part in little of the pool's optional machinery: webR has
// no memory snapshot pyrun can make (docs/protocol.md says why), R packages
// beyond the 16 bundled ones would need the network, and the network,
// globals and host tool calls are Python's. Mounts it has: R's data is
// often a folder of files.
type rEngine struct{}

func (rEngine) Name() string { return "r" }

// Versions reads webR's package.json and the version of R's own
// translations package, which is R's version, from the runtime folder.
func (rEngine) Versions(rt *Runtime) map[string]string {
	v := map[string]string{}
	dist := filepath.Join(rt.Dir, "node_modules", "webr")
	if b, err := os.ReadFile(filepath.Join(dist, "package.json")); err == nil {
		var meta struct {
			Version string `json:"version"`
		}
		if json.Unmarshal(b, &meta) == nil && meta.Version != "" {
			v["webr"] = meta.Version
		}
	}
	desc := filepath.Join(dist, "dist", "vfs", "usr", "lib", "R", "library", "translations", "DESCRIPTION")
	if b, err := os.ReadFile(desc); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if ver, ok := strings.CutPrefix(sc.Text(), "Version: "); ok {
				v["r"] = strings.TrimSpace(ver)
				break
			}
		}
	}
	return v
}

// DefaultMemoryLimit: a webR worker idles at 300-440 MiB resident and
// reaches 530-630 MiB after its first plot (fonts, the PNG device), so
// 1 GiB leaves a call some 400 MiB of R heap.
func (rEngine) DefaultMemoryLimit() int64 { return 1 << 30 }

// StartupWork: after ready, V8 goes on compiling webR's R.wasm in the
// background, a CPU's worth for about 12 s on a quiet machine (measured:
// 14 s of CPU time, ready at 2.4 s, quiet from 13 s), longer under load.
// The idle CPU checks would take that for code a call left running and
// replace the worker again and again; they judge it once it has been seen
// quiet, or after a minute. That compile runs on V8's own threads, which
// the checks leave out (engineCPU: measured, R's and the main thread use
// 10-20 ms of 750 ms in the 5 s after ready); the grace stays for any of
// that work V8 may do on a thread that also runs code.
func (rEngine) StartupWork() time.Duration { return time.Minute }

func (rEngine) Features() Features { return Features{Mounts: true} }

func (rEngine) Program() string { return "webr/main.ts" }

func (rEngine) Files() []string {
	return []string{"node_modules/webr/dist/webr.mjs", "node_modules/webr/dist/R.wasm", "node_modules/webr/dist/webr-worker.js"}
}

// Permissions:
//   - read of the R worker program (webr/) and of webR's dist folder (R.wasm,
//     the R library, fonts: what R reads when it starts and when it loads a
//     base package or draws text). The worker also imports ../protocol.ts,
//     which as a static import needs no permission. Nothing else is read:
//     R's own file system is webR's in-memory one, so R's readLines on
//     /etc/passwd finds no such file. The host folders of --mount are
//     added by the pool (Features.Mounts), as for Python.
//   - env TEXT_ENCODING and TEXT_DECODER only: the msgpack bundled in webR
//     reads them (docs/architecture.md, Facts the design rests on); never
//     the host's other variables.
//   - --node-modules-dir=manual: with --no-config, Deno resolves the bare
//     "webr" import through <rt.Dir>/package.json and node_modules only in
//     this mode, and only then loads webR's CommonJS files (R.js uses
//     __dirname) as CommonJS.
//
// Never run: with it, R's exit after an interrupt at top level of a
// non-interactive R would run `rm -Rf` on the host (docs/architecture.md, Facts); the worker
// keeps R interactive besides. No net (webR would fetch packages from
// repo.r-wasm.org), no write, no sys, no ffi.
func (rEngine) Permissions(rt *Runtime) (Permissions, error) {
	return Permissions{
		Read: []string{
			filepath.Join(rt.Dir, "webr"),
			filepath.Join(rt.Dir, "node_modules", "webr", "dist"),
		},
		Flags: []string{
			"--allow-env=TEXT_ENCODING,TEXT_DECODER",
			"--node-modules-dir=manual",
		},
	}, nil
}

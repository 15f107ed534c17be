package supervisor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"
)

// javascriptEngine runs JavaScript and TypeScript in Deno itself:
// pyodide-host/js/main.ts, whose host thread runs each call's code in a
// Deno Worker that has no permissions at all (docs/protocol.md, Engines:
// JavaScript). No snapshots (a worker starts in ~0.3 s), no packages, no
// network, no globals, no tool calls; mounts, read and written through the
// runner's pyrun API.
type javascriptEngine struct{}

// JavaScript is the engine of JavaScript/TypeScript in Deno Workers.
var JavaScript Engine = javascriptEngine{}

func (javascriptEngine) Name() string { return "javascript" }

// Versions: Deno's and TypeScript's, from their npm packages in the
// runtime (V8's is known only to a running Deno: the ready event says it).
func (javascriptEngine) Versions(rt *Runtime) map[string]string {
	v := map[string]string{}
	for name, pkg := range map[string]string{"deno": "deno", "typescript": "typescript"} {
		if ver := packageVersion(rt, pkg); ver != "" {
			v[name] = ver
		}
	}
	return v
}

func packageVersion(rt *Runtime, pkg string) string {
	b, err := os.ReadFile(filepath.Join(rt.Dir, "node_modules", pkg, "package.json"))
	if err != nil {
		return ""
	}
	var meta struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(b, &meta) != nil {
		return ""
	}
	return meta.Version
}

// DefaultMemoryLimit: a JavaScript worker idles at ~100 MiB resident (Deno,
// TypeScript's parser ~60 MiB, two Worker isolates); 512 MiB leaves a call
// ~300 MiB before the host ends it as memory-error at the limit less 96 MiB.
func (javascriptEngine) DefaultMemoryLimit() int64 { return 512 << 20 }

func (javascriptEngine) StartupWork() time.Duration { return 0 }

func (javascriptEngine) Features() Features { return Features{Mounts: true} }

func (javascriptEngine) Program() string { return "js/main.ts" }

func (javascriptEngine) Files() []string {
	return []string{"node_modules/typescript/lib/typescript.js"}
}

// Permissions are the host thread's; the user's code runs in a Worker the
// host creates with permissions "none", which Deno allows only with
// --unstable-worker-options (without it the process exits at once):
//   - read of js/ (the host program and runner.ts, which the host hands to
//     the Worker as a blob: module) and of TypeScript's compiler file, whose
//     parser finds a call's syntax errors, last expression and top-level
//     declarations. The Worker reads none of it.
//   - the host folders of --mount, added by the pool (Features.Mounts):
//     read of each, write of those mounted :rw. The host thread alone uses
//     them, for the runner's pyrun.readFile, readDir and writeFile
//     (js/main.ts, fsForRunner): the Worker gets none, since Deno lets a
//     file opened for reading have its mode changed (fchmod).
//   - no env (TypeScript is loaded without `process`), no net, run, ffi,
//     sys or import: the user's Worker could not use them anyway, and the
//     host needs none.
//
// No --v8-flags heap cap: Permissions cannot see the configured memory
// limit, and the host's own check of RSS against heap_limit during each
// call (memory-error) plus the pool's RSS watchdog are the limits.
// --expose-gc lets the host collect the parse tree of a big call's code at
// once (js/main.ts, collectAfterParse): V8 left ~150 MiB of it per MiB of
// code to pile up over calls, past heap_limit. The runner deletes gc from
// the user's Worker.
func (javascriptEngine) Permissions(rt *Runtime) (Permissions, error) {
	return Permissions{
		Read: []string{
			filepath.Join(rt.Dir, "js"),
			filepath.Join(rt.Dir, "node_modules", "typescript", "lib", "typescript.js"),
		},
		Flags: []string{"--unstable-worker-options", "--v8-flags=--expose-gc"},
	}, nil
}

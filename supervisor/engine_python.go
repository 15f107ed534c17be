package supervisor

import "time"

import "path/filepath"

// pythonEngine runs Python in Pyodide: pyodide-host/main.ts and the files
// it loads. It takes part in everything: snapshots, packages, the network
// modes, mounts, globals and code mode's tool calls.
type pythonEngine struct{}

func (pythonEngine) Name() string { return "python" }

func (pythonEngine) Versions(rt *Runtime) map[string]string {
	return map[string]string{"python": rt.Python, "pyodide": rt.Pyodide}
}

// DefaultMemoryLimit: Pyodide idles at 185-215 MiB resident; 512 MiB
// leaves a call ~300 MiB of wasm heap.
func (pythonEngine) DefaultMemoryLimit() int64 { return 512 << 20 }

func (pythonEngine) StartupWork() time.Duration { return 0 }

func (pythonEngine) Features() Features {
	return Features{Snapshots: true, Packages: true, Network: true, Mounts: true, Globals: true, Tools: true, Warming: true}
}

func (pythonEngine) Program() string { return "main.ts" }

// Permissions: read of the worker program and Pyodide's own files, nothing
// else (the pool adds the snapshot, the package cache and mounts). Python
// sees these (they are public); it cannot change them, as no write
// permission is granted anywhere: a snapshot reaches its file through the
// maker's stdout. No other flag: env (the host's variables), run
// (subprocesses, and signals to any process but the worker itself), ffi
// (native code), sys (facts about the host) and imports of remote code stay
// refused, to Python as well.
func (pythonEngine) Files() []string {
	var files []string
	for _, f := range []string{"pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"} {
		files = append(files, filepath.Join("node_modules", "pyodide", f))
	}
	return files
}

func (pythonEngine) Permissions(rt *Runtime) (Permissions, error) {
	var read []string
	for _, f := range []string{
		"worker.ts", "checkpoint.ts", "chunks.ts", "lines.ts", "protocol.ts", "serve.ts", "mounts.ts", "guards.ts", "toolcalls.ts",
		"warm.ts", "sessions.ts", "dynlibs.ts", "python",
	} {
		read = append(read, filepath.Join(rt.Dir, f))
	}
	read = append(read, filepath.Join(rt.Dir, "node_modules", "pyodide"))
	return Permissions{Read: read}, nil
}

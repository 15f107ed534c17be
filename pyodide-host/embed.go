// Package pyodidehost carries pyrun's Deno worker programs: the TypeScript
// host, the Python helper it loads into Pyodide (python/), the R worker (webr/, R in
// webR, docs/protocol.md, Engines: R), the JavaScript engine's program in js/
// (docs/protocol.md, Engines: JavaScript), and the npm manifest that pins Deno,
// Pyodide, webR and TypeScript. The supervisor writes these files into its
// runtime folder and installs the manifest there with npm.
package pyodidehost

import "embed"

// Files is the worker program, as the runtime folder receives it.
//
//go:embed webr js main.ts worker.ts checkpoint.ts chunks.ts lines.ts protocol.ts serve.ts events.ts guards.ts mounts.ts toolcalls.ts warm.ts sessions.ts dynlibs.ts python package.json package-lock.json
var Files embed.FS

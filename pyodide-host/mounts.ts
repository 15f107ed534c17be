// Host folders mounted into Pyodide's file system (--mount), for pyrun's
// worker thread (worker.ts).

// @ts-types="./node_modules/pyodide/pyodide.d.ts"
import type { PyodideInterface } from "./node_modules/pyodide/pyodide.mjs";
import type { Mount } from "./protocol.ts";

/**
 * Mounts each host folder at its sandbox path with Emscripten's NODEFS
 * (pyodide.mountNodeFS), which reaches the host through Deno's node:fs.
 * Deno's permissions decide what Python may do there: the supervisor grants
 * read for every mount and write only for the read-write ones.
 *
 * A refused operation throws Deno's NotCapable, which has no `code`; NODEFS
 * turns only errors with a code into an errno, and anything else becomes a
 * fatal error that ends Pyodide. Giving NotCapable the code EACCES makes a
 * write to a read-only mount a PermissionError in Python instead.
 */
export function mountHostFolders(py: PyodideInterface, mounts: Mount[]): void {
  if (!mounts.length) return;
  Object.defineProperty(Deno.errors.NotCapable.prototype, "code", {
    value: "EACCES",
    configurable: true,
  });
  for (const m of mounts) py.mountNodeFS(m.path, m.host);
  const display = py.pyimport("pyrun_display") as unknown as { mounted(paths: string): void };
  display.mounted(JSON.stringify(mounts.map((m) => m.path)));
}

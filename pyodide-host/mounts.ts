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
 *
 * Errors of the OS that Deno has no class for (a file past the worker's
 * size limit, RLIMIT_FSIZE: "File too large (os error 27)"; past its open
 * files limit) have no `code` either: NODEFS's tryFSOperation gets them
 * with the code of their errno, so that Python sees an OSError.
 */
export function mountHostFolders(py: PyodideInterface, mounts: Mount[]): void {
  if (!mounts.length) return;
  Object.defineProperty(Deno.errors.NotCapable.prototype, "code", {
    value: "EACCES",
    configurable: true,
  });
  // deno-lint-ignore no-explicit-any
  const nodefs = (py.FS as any).filesystems.NODEFS;
  const tryFSOperation = nodefs.tryFSOperation;
  nodefs.tryFSOperation = <T>(f: () => T): T =>
    tryFSOperation(() => {
      try {
        return f();
      } catch (e) {
        throw withErrnoCode(e);
      }
    });
  for (const m of mounts) py.mountNodeFS(m.path, m.host);
  const display = py.pyimport("pyrun_display") as unknown as { mounted(paths: string): void };
  display.mounted(JSON.stringify(mounts.map((m) => m.path)));
}

/** The codes of the errnos an OS error without a Deno class may carry. */
export const ERRNO_NAMES: Record<string, string> = {
  "1": "EPERM",
  "5": "EIO",
  "13": "EACCES",
  "23": "ENFILE",
  "24": "EMFILE",
  "27": "EFBIG",
  "28": "ENOSPC",
  "30": "EROFS",
  "122": "EDQUOT",
};

/** e, given the code of the errno its message ends with, if it has none. */
export function withErrnoCode(e: unknown): unknown {
  if (!(e instanceof Error) || "code" in e) return e;
  const n = /\(os error (\d+)\)$/.exec(e.message)?.[1];
  const code = n && ERRNO_NAMES[n];
  if (code) Object.defineProperty(e, "code", { value: code, configurable: true });
  return e;
}

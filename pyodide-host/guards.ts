// Guards of a worker's state that Python code cannot switch off, because
// they live on the JavaScript side, below every path Python has to the file
// system (open, os.* with dir_fd, symlinks and a working directory that
// follows them, os.replace, mmap): Emscripten's FS functions, which every
// file system call of Python goes through.

/** Emscripten's FS object, whose functions the file guard wraps. */
// deno-lint-ignore no-explicit-any
type EmscriptenFS = Record<string, any>;

/** Where a call may make, remove or rename names: what pyrun empties after it. */
const CHANGE_ROOTS = ["/home/pyodide", "/tmp"];
/** Where it may also write to files that exist: devices (/dev/null, the tty). */
const WRITE_ROOTS = [...CHANGE_ROOTS, "/dev"];
/** Emscripten's EACCES: Python raises PermissionError. */
const EACCES = 2;

function under(path: string, roots: string[]): boolean {
  return roots.some((r) => path === r || path.startsWith(r + "/"));
}

export interface FileGuard {
  /** Runs fn with the guard off: Pyodide's loader writes packages into site-packages. */
  loading<T>(fn: () => Promise<T>): Promise<T>;
}

/**
 * Makes the file system outside the working directory and /tmp unwritable
 * to Python: every FS function that changes it refuses (PermissionError)
 * when the place it would change, looked up after symlinks with the working
 * directory and dir_fd already applied, lies outside them. Whatever the
 * call did, and whenever (a callback it left behind runs during a later
 * call), site-packages and the standard library stay as the worker started,
 * and nothing but the scratch folders, which pyrun empties after every
 * call, outlives a call.
 */
export function guardFiles(FS: EmscriptenFS, extra: string[] = []): FileGuard {
  // extra: /output/ and the read-write host mounts (--mount ...:rw), which
  // calls may change too; pyrun empties /output/ itself, and a writable
  // mount is the operator's explicit choice.
  const changeRoots = [...CHANGE_ROOTS, ...extra];
  const writeRoots = [...WRITE_ROOTS, ...extra];
  let loads = 0; // package loads in progress
  const nodePath = (node: unknown): string => FS.getPath(node);
  // The place a name is made or removed at: its parent's real path.
  const entryPath = (path: unknown): string | null => {
    let parent;
    try {
      parent = FS.lookupPath(path, { parent: true }).node;
    } catch {
      return null; // the call fails on its own
    }
    const name = String(path).replace(/\/+$/, "").split("/").pop() ?? "";
    return nodePath(parent).replace(/\/$/, "") + "/" + name;
  };
  const wrap = (
    name: string,
    where: (...args: unknown[]) => (string | null)[],
    roots: string[],
  ) => {
    const orig = FS[name];
    if (typeof orig !== "function") throw new Error(`pyrun: Emscripten's FS has no ${name}`);
    FS[name] = function (this: unknown, ...args: unknown[]) {
      if (!loads) {
        for (const p of where(...args)) {
          if (p !== null && !under(p, roots)) throw new FS.ErrnoError(EACCES);
        }
      }
      return orig.apply(this, args);
    };
  };
  const streamNode = (s: unknown) => [nodePath((s as { node: unknown }).node)];
  wrap("mknod", (p) => [entryPath(p)], changeRoots); // files, folders, devices
  wrap("symlink", (_target, p) => [entryPath(p)], changeRoots);
  wrap("rename", (a, b) => [entryPath(a), entryPath(b)], changeRoots);
  wrap("unlink", (p) => [entryPath(p)], changeRoots);
  wrap("rmdir", (p) => [entryPath(p)], changeRoots);
  // chmod, chown, truncate and their f- and l- forms all end here.
  wrap("doSetAttr", (_stream, node) => [nodePath(node)], writeRoots);
  wrap("utime", (p) => {
    try {
      return [nodePath(FS.lookupPath(p, { follow: true }).node)];
    } catch {
      return [null];
    }
  }, writeRoots);
  wrap("write", streamNode, writeRoots);
  wrap("msync", streamNode, changeRoots); // a shared writable mmap
  return {
    async loading<T>(fn: () => Promise<T>): Promise<T> {
      loads++;
      try {
        return await fn();
      } finally {
        loads--;
      }
    },
  };
}

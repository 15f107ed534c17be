// Guards of a worker's state that code cannot switch off by the language's
// own means, because they live on the JavaScript side, below every path the
// language has to the file system (Python's open, os.* with dir_fd,
// symlinks and a working directory that follows them, os.replace, mmap;
// R's file functions): Emscripten's FS functions, which every file system
// call of Pyodide and of webR goes through. The Python worker installs the
// guard in its Worker thread (worker.ts); the R worker in R's thread
// (webr/thread.ts), from this function's source: guardFiles is therefore
// self-contained, using nothing from this module but its arguments.

/** Emscripten's FS object, whose functions the file guard wraps. */
// deno-lint-ignore no-explicit-any
type EmscriptenFS = Record<string, any>;

/** Where a call may change the file system (paths inside the engine's own file system). */
export interface GuardRoots {
  /**
   * Where a call may make, remove or rename names: the scratch folders,
   * which pyrun empties after a stateless call, /output/ and the
   * read-write mounts (--mount ...:rw, a writable mount is the operator's
   * explicit choice).
   */
  change: string[];
  /** Where it may also write to files that exist: devices (/dev/null, the tty). */
  write: string[];
  /**
   * The read-write mounts: host folders, where a mode change that adds
   * setuid, setgid, sticky or write for others is refused.
   */
  host: string[];
}

export interface FileGuard {
  /** Runs fn with the guard off: Pyodide's loader writes packages into site-packages. */
  loading<T>(fn: () => Promise<T>): Promise<T>;
  /** The same for a function that does not await: webR's loader of its lazy files. */
  loadingNow<T>(fn: () => T): T;
}

/**
 * Makes the file system outside roots.change unwritable: every FS function
 * that changes it refuses (EACCES: Python raises PermissionError, R says
 * "Permission denied") when the place it would change, looked up after
 * symlinks with the working directory and dir_fd already applied, lies
 * outside them. Whatever the call did, and whenever (a callback it left
 * behind runs during a later call), the engine's library stays as the
 * worker started, and nothing but the scratch folders, which pyrun empties
 * after every call, outlives a call.
 *
 * Two rules hold everywhere, also while packages load:
 *
 *  - A name longer than 255 bytes (Linux's NAME_MAX) is refused
 *    (ENAMETOOLONG). Emscripten's in-memory file system would take it, but
 *    its readdir hands out names cut at 255 bytes, so a folder walk (os.listdir, list.files)
 *    sees a name no one can open or remove: such files outlived pyrun's
 *    clean-up, and one in /output/ ended the R worker.
 *  - Files and folders are made without setuid, setgid, sticky and write
 *    for others (a umask of 7002: `open(path, "w")` asks for 0666 and
 *    gets 0664), and a mode change under roots.host that would add any of
 *    those bits is refused (EPERM): on a read-write mount the mode is a
 *    host file's, and a setuid or world-writable file there is the host's
 *    problem.
 */
export function guardFiles(FS: EmscriptenFS, roots: GuardRoots): FileGuard {
  const EACCES = 2; // Emscripten's errno numbers
  const EPERM = 63;
  const ENAMETOOLONG = 37;
  const NAME_MAX = 255;
  const SPECIAL = 0o7002; // setuid, setgid, sticky, write for others
  const encoder = new TextEncoder();
  const under = (path: string, list: string[]) =>
    list.some((r) => path === r || path.startsWith(r + "/"));
  let loads = 0; // package loads in progress
  const nodePath = (node: unknown): string => FS.getPath(node);
  const baseName = (path: unknown) => String(path).replace(/\/+$/, "").split("/").pop() ?? "";
  // The place a name is made or removed at: its parent's real path.
  const entryPath = (path: unknown): string | null => {
    let parent;
    try {
      parent = FS.lookupPath(path, { parent: true }).node;
    } catch {
      return null; // the call fails on its own
    }
    return nodePath(parent).replace(/\/$/, "") + "/" + baseName(path);
  };
  const checkName = (path: unknown) => {
    if (encoder.encode(baseName(path)).length > NAME_MAX) throw new FS.ErrnoError(ENAMETOOLONG);
  };
  const wrap = (
    name: string,
    where: (...args: unknown[]) => (string | null)[],
    list: string[],
    check?: (args: unknown[]) => void,
  ) => {
    const orig = FS[name];
    if (typeof orig !== "function") throw new Error(`pyrun: Emscripten's FS has no ${name}`);
    FS[name] = function (this: unknown, ...args: unknown[]) {
      check?.(args);
      if (!loads) {
        for (const p of where(...args)) {
          if (p !== null && !under(p, list)) throw new FS.ErrnoError(EACCES);
        }
      }
      return orig.apply(this, args);
    };
  };
  const streamNode = (s: unknown) => [nodePath((s as { node: unknown }).node)];
  // Files, folders, devices: every name made goes through mknod.
  wrap("mknod", (p) => [entryPath(p)], roots.change, (args) => {
    checkName(args[0]);
    if (typeof args[1] === "number") args[1] &= ~SPECIAL;
  });
  // Emscripten's open makes a file with mode | 0777, then sets the mode it
  // was asked for (FS.chmod): the umask must be in that mode already, or
  // the chmod would add write for others back (and be refused on a mount).
  const open = FS.open;
  FS.open = function (this: unknown, ...args: unknown[]) {
    const flags = args[1];
    const creates = typeof flags === "number" ? (flags & 64) !== 0 : /[wa+]/.test(String(flags));
    if (creates) args[2] = (typeof args[2] === "number" ? args[2] : 0o666) & ~SPECIAL;
    return open.apply(this, args);
  };
  wrap("symlink", (_target, p) => [entryPath(p)], roots.change, (args) => checkName(args[1]));
  wrap(
    "rename",
    (a, b) => [entryPath(a), entryPath(b)],
    roots.change,
    (args) => checkName(args[1]),
  );
  wrap("unlink", (p) => [entryPath(p)], roots.change);
  wrap("rmdir", (p) => [entryPath(p)], roots.change);
  // chmod, chown, truncate and their f- and l- forms all end here.
  wrap("doSetAttr", (_stream, node) => [nodePath(node)], roots.write, (args) => {
    const node = args[1] as { mode: number };
    const mode = (args[2] as { mode?: number } | undefined)?.mode;
    if (typeof mode !== "number" || !(mode & ~node.mode & SPECIAL)) return;
    if (under(nodePath(node), roots.host)) throw new FS.ErrnoError(EPERM);
  });
  wrap("utime", (p) => {
    try {
      return [nodePath(FS.lookupPath(p, { follow: true }).node)];
    } catch {
      return [null];
    }
  }, roots.write);
  wrap("write", streamNode, roots.write);
  wrap("msync", streamNode, roots.change); // a shared writable mmap
  return {
    async loading<T>(fn: () => Promise<T>): Promise<T> {
      loads++;
      try {
        return await fn();
      } finally {
        loads--;
      }
    },
    loadingNow<T>(fn: () => T): T {
      loads++;
      try {
        return fn();
      } finally {
        loads--;
      }
    },
  };
}

/**
 * Empties a folder of the engine's file system, keeping the folder: every
 * name in it, however long (its readdir gives whole names; a folder walk
 * of the language's own gets names cut at 255 bytes), symlinks removed
 * rather than followed. Like guardFiles it is self-contained: the R worker
 * runs its source in R's thread. What cannot be removed is left.
 */
export function clearFolder(FS: EmscriptenFS, path: string): void {
  const clear = (dir: string) => {
    let names: string[];
    try {
      names = FS.readdir(dir);
    } catch {
      return;
    }
    for (const name of names) {
      if (name === "." || name === "..") continue;
      const full = dir === "/" ? "/" + name : dir + "/" + name;
      try {
        if (FS.isDir(FS.lstat(full).mode)) {
          clear(full);
          FS.rmdir(full);
        } else {
          FS.unlink(full);
        }
      } catch {
        // left: a mount point, or a file the call made unremovable
      }
    }
  };
  clear(path);
}

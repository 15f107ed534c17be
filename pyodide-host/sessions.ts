// Session namespaces on a shared session worker (docs/sessions.md, Shared
// session workers; docs/protocol.md, Sessions): several sessions of one
// client on one worker, each with its own globals, files, modules, random
// state, environment and current directory. A run names its namespace; the
// worker switches to it first: the Python state through pyrun_sessions.py,
// the files here, by renaming folders of Emscripten's in-memory file system
// (a rename is O(1) however many files a session has).

import { clearFolder, type FileGuard } from "./guards.ts";

// deno-lint-ignore no-explicit-any
type EmscriptenFS = Record<string, any>;

/** pyodide-host/python/pyrun_sessions.py, as the host calls it. */
interface PySessions {
  save(ns: string): void;
  load(ns: string): void;
  drop(ns: string): void;
  /** Forgets ns, the namespace switched in, without keeping its state first. */
  discard(ns: string): void;
  /** JSON: {"current": the namespace switched in ("" for none), "others": those switched out}. */
  names(): string;
}

/** The folders a session keeps, by where a call sees them. */
const FOLDERS: [string, string][] = [["/home/pyodide", "home"], ["/output", "output"], [
  "/tmp",
  "tmp",
]];
/** Where switched-out sessions' folders wait, out of the calls' reach (guards.ts). */
export const STORE = "/sessions";
/** What a namespace name may be: the supervisor mints them ("s1", ...). */
const NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** Checks a run's namespace and drops: names the supervisor minted. Throws on a bad one. */
export function checkNamespaces(ns: string, drop: string[]): void {
  for (const name of [ns, ...drop]) {
    if (!NAME.test(name)) throw new Error(`bad namespace name ${JSON.stringify(name)}`);
  }
}

export interface Namespaces {
  /**
   * Makes ns the namespace of the next call, then forgets the namespaces
   * in drop (their tasks are cancelled, their files removed). ns itself in
   * drop: the call is its session's last, and settle forgets it. Throws on
   * a bad name.
   */
  enter(ns: string, drop: string[]): void;
  /**
   * After a call, once its result is out: forgets the namespace of a
   * session whose last call it was, so that the next session switches in
   * without saving it first (the worker is then nobody's).
   */
  settle(): void;
  /**
   * After a restore from a checkpoint (checkpoint.ts): takes up the
   * namespaces it holds, which Python's heap and the files under /sessions
   * keep (this registry is not in a memory snapshot); with keep, the
   * worker then keeps that namespace only, switched in, and drops the
   * others (docs/sessions.md, Durable sessions).
   */
  resume(keep: string): void;
}

export function namespaces(FS: EmscriptenFS, guard: FileGuard, py: PySessions): Namespaces {
  // "" is the worker's state before any namespace, which nothing keeps.
  let current = "";
  // The namespace of a session whose last call is running, if any.
  let ending = "";
  const folders = sessionFolders(FS, (fn) => guard.loadingNow(fn), FOLDERS, STORE, clearFolder);
  const spaces: Namespaces = {
    resume(keep) {
      const held = JSON.parse(py.names()) as { current: string; others: string[] };
      current = held.current;
      if (keep) spaces.enter(keep, [current, ...held.others].filter((n) => n && n !== keep));
    },
    enter(ns, drop) {
      checkNamespaces(ns, drop);
      if (ns !== current) {
        // Out of the folders before they move; pyrun_sessions goes back to
        // the session's own directory in load.
        py.save(current);
        FS.chdir("/");
        folders.swap(current, ns);
        py.load(ns);
        current = ns;
      }
      ending = "";
      for (const d of drop) {
        if (d === current) {
          ending = current; // the session's last call
          continue;
        }
        py.drop(d);
        folders.drop(d);
      }
    },
    settle() {
      if (!ending || ending !== current) return;
      py.discard(ending);
      FS.chdir("/");
      folders.swap("", ""); // its folders go, not into the store
      current = ending = "";
    },
  };
  return spaces;
}

/** A session's folders, as sessionFolders moves them. */
export interface SessionFolders {
  /** Puts from's folders away into the store and brings to's back ("": nobody's, not kept). */
  swap(from: string, to: string): void;
  /** Removes ns's folders from the store. */
  drop(ns: string): void;
}

/**
 * Moves sessions' folders between where calls see them and the store, by
 * renaming (O(1) however many files a session has), with the file guard
 * off (unguarded runs fn so), emptying with clear (guards.ts's
 * clearFolder). Self-contained, as guards.ts's functions are: the R worker
 * runs its source in R's thread (webr/thread.ts).
 * folders: [where a call sees it, its name in a session's store folder].
 */
export function sessionFolders(
  FS: EmscriptenFS,
  unguarded: (fn: () => void) => void,
  folders: [string, string][],
  storeDir: string,
  clear: (FS: EmscriptenFS, path: string) => void,
): SessionFolders {
  const exists = (p: string) => {
    try {
      FS.lstat(p);
      return true;
    } catch {
      return false;
    }
  };
  const remove = (dir: string) => {
    if (!exists(dir)) return;
    clear(FS, dir);
    FS.rmdir(dir);
  };
  const store = (ns: string) => `${storeDir}/${ns || "_"}`;
  return {
    swap(from, to) {
      unguarded(() => {
        if (!exists(storeDir)) FS.mkdir(storeDir);
        const out = store(from);
        remove(out);
        FS.mkdir(out);
        for (const [seen, kept] of folders) {
          if (exists(seen)) FS.rename(seen, `${out}/${kept}`);
        }
        if (from === "") remove(out); // nobody comes back to it
        const back = store(to);
        for (const [seen, kept] of folders) {
          if (exists(`${back}/${kept}`)) FS.rename(`${back}/${kept}`, seen);
          else if (seen !== "/output") FS.mkdir(seen); // /output/ is made by the first call that needs it
        }
        remove(back);
      });
    },
    drop(ns) {
      unguarded(() => remove(store(ns)));
    },
  };
}

// R's thread, set up before pyrun.R loads and takes webr::eval_js and
// webr::mount away (docs/protocol.md, Engines: R): console.* there, the heap's
// cap, the mounted host folders. For the R worker (main.ts).

import type { WebR } from "webr";
import type { Mount } from "../protocol.ts";
import { ERRNO_NAMES } from "../mounts.ts";
import { clearFolder, guardFiles } from "../guards.ts";
import { sessionFolders, STORE } from "../sessions.ts";

/**
 * Sets up R's thread, through webR's eval_js, before pyrun.R takes that
 * away: console.* there writes to this process's stdout, the protocol, so
 * it goes to stderr as in the main thread; and R's wasm heap is capped.
 *
 * Emscripten grows memory through WebAssembly.Memory.prototype.grow, and a
 * grow that throws makes malloc fail, which R reports as an error ("cannot
 * allocate vector"). heap_limit bounds the whole worker: of a webR
 * worker's ~500 MiB resident at start only ~55 MiB is R's heap (the rest
 * is Deno, two V8 isolates, R.wasm's code and R's library in webR's
 * in-memory file system), so the heap may grow to heap_limit less what the
 * worker holds outside it now, and never less than 64 MiB more than it
 * has. 0: no cap but wasm32's 4 GiB.
 */
export async function setUpRThread(webR: WebR, limit: number): Promise<void> {
  const heap = await webR.evalRNumber(`webr::eval_js("Module.HEAPU8.length")`);
  const outside = Math.max(0, Deno.memoryUsage().rss - heap);
  const cap = limit > 0 ? Math.max(limit - outside, heap + (64 << 20)) : 0;
  const js = `(() => {
    console.log = console.info = console.debug = console.error;
    const cap = ${cap};
    if (cap > 0) {
      const grow = WebAssembly.Memory.prototype.grow;
      WebAssembly.Memory.prototype.grow = function (delta) {
        if (this.buffer.byteLength + delta * 65536 > cap) {
          throw new RangeError("pyrun: memory limit of " + cap + " bytes reached");
        }
        return grow.call(this, delta);
      };
    }
    return 1;
  })()`;
  await webR.evalRVoid(`invisible(webr::eval_js(${JSON.stringify(js)}))`);
}

/**
 * Mounts each host folder at its sandbox path with Emscripten's NODEFS in
 * R's thread, where Deno's node:fs reaches the host; Deno's permissions
 * decide what R may do there (read for every mount, write only for the
 * read-write ones). It runs before pyrun.R takes webr::mount away.
 *
 * A refused operation throws Deno's NotCapable, which has no `code`; NODEFS
 * turns only errors with a code into an errno, and anything else would end
 * R's thread. Giving NotCapable the code EACCES in that thread makes a
 * write to a read-only mount an R error ("cannot open file ...:
 * Permission denied") instead. OS errors Deno has no class for (a file
 * past the worker's size limit) get the code of their errno, as in
 * Python's (../mounts.ts, withErrnoCode).
 */
export async function mountHostFolders(webR: WebR, mounts: Mount[]): Promise<void> {
  if (!mounts.length) return;
  const js = `(() => {
    Object.defineProperty(Deno.errors.NotCapable.prototype, "code", { value: "EACCES", configurable: true });
    const names = ${JSON.stringify(ERRNO_NAMES)};
    const nodefs = globalThis.FS.filesystems.NODEFS;
    const tryFSOperation = nodefs.tryFSOperation;
    nodefs.tryFSOperation = (f) => tryFSOperation(() => {
      try {
        return f();
      } catch (e) {
        const n = e instanceof Error && !("code" in e) && /\\(os error (\\d+)\\)$/.exec(e.message)?.[1];
        if (n && names[n]) Object.defineProperty(e, "code", { value: names[n], configurable: true });
        throw e;
      }
    });
    return 1;
  })()`;
  await webR.evalRVoid(`invisible(webr::eval_js(${JSON.stringify(js)}))`);
  for (const m of mounts) {
    // webR's FS has no recursive mkdir; R's dir.create has.
    await webR.evalRVoid(
      `dir.create(${JSON.stringify(m.path)}, recursive = TRUE, showWarnings = FALSE)`,
    );
    await webR.FS.mount("NODEFS", { root: m.host }, m.path);
  }
}

/**
 * Installs pyrun's file guard (guards.ts, from its source) in R's thread,
 * once the mounts are made: from here on R can change its file system only
 * in its home, /tmp, /output/, pyrun's plot folder and the read-write
 * mounts, names longer than 255 bytes are refused, files are made without
 * setuid, setgid, sticky or write for others, and a mode change that adds
 * one of those on a read-write mount is refused. Before it R's library
 * (/usr/lib/R) could be written, and a stateless call could leave a
 * changed package or data set for every later call to load. The folders it
 * makes first are pyrun.R's.
 *
 * A session worker's thread also gets Module.pyrunFolders (sessions.ts's
 * sessionFolders, from its source, with the guard's loadingNow): pyrun.R's
 * enter() moves sessions' folders with it (docs/sessions.md, Shared session
 * workers). folders: [where a call sees it, its name in the store], or
 * null for a worker of no sessions.
 */
export async function guardRThread(
  webR: WebR,
  home: string,
  dirs: string[],
  mounts: Mount[],
  folders: [string, string][] | null = null,
): Promise<void> {
  const rw = mounts.filter((m) => m.rw).map((m) => m.path);
  const change = [home, "/tmp", ...dirs, ...rw];
  const roots = { change, write: [...change, "/dev"], host: rw };
  // webR's file system is lazy: R's library, fonts and docs are read from
  // their images the first time a file is opened (createLazyFilesystem in
  // R.js), which makes folders and files under /usr. That is webR's own
  // loader at work, not the call's: the guard lets it.
  const store = JSON.stringify(STORE);
  const js = `(() => {
    for (const d of ${JSON.stringify(dirs)}) Module.FS.mkdirTree(d);
    const guard = (${guardFiles.toString()})(Module.FS, ${JSON.stringify(roots)});
    for (const name of ["mountImagePath", "mountImageUrl"]) {
      const load = Module[name];
      if (typeof load !== "function") throw new Error("pyrun: webR has no Module." + name);
      Module[name] = function (...args) {
        return guard.loadingNow(() => load.apply(this, args));
      };
    }
    const folders = ${JSON.stringify(folders)};
    if (folders) {
      Module.pyrunFolders = (${sessionFolders.toString()})(
        Module.FS, (fn) => guard.loadingNow(fn), folders, ${store}, ${clearFolder.toString()});
    }
    return 1;
  })()`;
  await webR.evalRVoid(`invisible(webr::eval_js(${JSON.stringify(js)}))`);
}

// Checkpoints of a Python session's worker (docs/sessions.md, Durable
// sessions): the interpreter's memory (Pyodide's memory snapshot, taken after
// user code ran) and its files, and the start of a worker from them.
//
// What a restored process must redo, because nothing on the JavaScript side
// is in the snapshot: the host's functions are reached by Python through
// `from js import pyrunHost` (recorded as access paths, resolved again in the
// new process), never passed as arguments; JavaScript objects Python held come
// back as dead placeholders; the clock continues where it was; files, open
// descriptors, inode numbers and the working directory come from a blob.
// deno-lint-ignore-file no-explicit-any

// @ts-types="./node_modules/pyodide/pyodide.d.ts"
import type { PyodideInterface } from "./node_modules/pyodide/pyodide.mjs";

/** Marks a hiwire slot that holds no object (undefined, a symbol) while a snapshot is taken. */
const PRIM = "__pyrunPrimitive";

/**
 * Defines the host's functions, reached from Python as `from js import
 * pyrunHost`, as stable functions that call impl's of the same name: they
 * must exist before a restore (Pyodide resolves the paths then), and the
 * real ones are made after it.
 */
/** The host's functions by name (installHost). */
export type HostFunctions = Record<string, (...a: any[]) => unknown>;

export function installHost(names: string[], impl: HostFunctions): void {
  const host: Record<string, unknown> = {};
  for (const n of names) host[n] = (...a: unknown[]) => impl[n](...a);
  (globalThis as any).pyrunHost = host;
}

/** What makeCheckpoint gives: the memory snapshot, the files' blob, and the clock then. */
export interface Checkpoint {
  mem: Uint8Array;
  fs: Uint8Array;
  clock: number;
}

/** A JS value that did not survive a restore: every use throws a clear error. */
function deadPlaceholder(desc: { type?: string; repr?: string }): unknown {
  const what = `${desc.type ?? "object"}${desc.repr ? ` ${desc.repr}` : ""}`;
  const msg =
    `pyrun: this JavaScript ${what} did not survive the session's restore from a checkpoint`;
  const fail = () => {
    throw new Error(msg);
  };
  return new Proxy(function dead() {}, {
    get(_t, k) {
      // Pyodide and repr() may inspect it without a throw.
      if (k === Symbol.toPrimitive || k === "toString") return () => `<dead ${what}>`;
      if (k === Symbol.toStringTag) return "PyrunDead";
      if (typeof k === "symbol") return undefined;
      fail();
    },
    set: fail as any,
    has: () => false,
    apply: fail as any,
    construct: fail as any,
    ownKeys: () => ["prototype"],
    getOwnPropertyDescriptor: (t, k) => Reflect.getOwnPropertyDescriptor(t, k),
  });
}

function serializer(M: any): (obj: any) => unknown {
  return (obj) => {
    if (obj && typeof obj === "object" && PRIM in obj) return { prim: obj[PRIM], desc: obj.desc };
    // A PyProxy held through a JsProxy: the Python object is in the heap.
    if (M.API?.isPyProxy?.(obj)) return { pyproxy: M.PyProxy_getPtr(obj) };
    const host = (globalThis as any).pyrunHost ?? {};
    for (const [k, v] of Object.entries(host)) if (v === obj) return { host: k };
    let type = "object", repr = "";
    try {
      type = obj?.constructor?.name ?? typeof obj;
    } catch { /* a revoked proxy */ }
    try {
      repr = String(obj).slice(0, 60);
    } catch { /* */ }
    return { dead: { type, repr } };
  };
}

function deserializer(module: () => any): (o: any) => unknown {
  return (o) => {
    if (o?.prim === "undefined") return undefined;
    if (o?.prim === "symbol") return Symbol(o.desc);
    if (o?.pyproxy && module()) return module().pyproxy_new(o.pyproxy);
    if (o?.host) {
      return (globalThis as any).pyrunHost?.[o.host] ?? deadPlaceholder({ type: "host " + o.host });
    }
    return deadPlaceholder(o?.dead ?? {});
  };
}

/**
 * Why a checkpoint of py would not restore right, or "": native code (ctypes,
 * a package's shared library) added wasm function-table entries that are not
 * in a memory snapshot, and calling one after a restore is a fatal error.
 */
export function nonDurable(py: PyodideInterface, tableAtReady: number): string {
  const t = (py as any)._module?.wasmTable?.length ?? 0;
  if (t > tableAtReady) {
    return "the session loaded native code (ctypes or a package's shared library), which a checkpoint cannot restore";
  }
  return "";
}

/** Takes a checkpoint of py: memory and files. roots: the folders whose files are kept. */
export function makeCheckpoint(py: PyodideInterface, roots: string[], skip: string[]): Checkpoint {
  const M = (py as any)._module;
  const orig = M.__hiwire_get;
  // Ordinary code leaves primitives (undefined, symbols) in hiwire slots,
  // which Pyodide's serializer refuses before it asks ours: show them as
  // markers while the snapshot is taken. This wrapper must never throw
  // (Pyodide would take a throw for the end of the table).
  M.__hiwire_get = (i: number) => {
    const v = orig(i);
    if (i > 6 && (v === undefined || (typeof v !== "object" && typeof v !== "function"))) {
      let desc = "";
      try {
        desc = typeof v === "symbol" ? String(v.description ?? "") : String(v);
      } catch { /* */ }
      return { [PRIM]: typeof v, desc };
    }
    return v;
  };
  let mem: Uint8Array;
  try {
    mem = (py as any).makeMemorySnapshot({ serializer: serializer(M) });
  } finally {
    M.__hiwire_get = orig;
  }
  return { mem, fs: packFiles(py.FS, roots, skip), clock: performance.now() };
}

/**
 * Options for loadPyodide that restore a checkpoint's memory: the heap grown
 * to the checkpoint's size first (Pyodide restores into the module's own
 * 30 MiB memory and would fail on a larger heap), and JS values revived.
 */
export async function restoreOptions(
  mem: Uint8Array,
  indexURL: string,
): Promise<Record<string, unknown>> {
  const heapLen = mem.length - new Uint32Array(mem.buffer, mem.byteOffset, 2)[1];
  const factory = (await import(indexURL + "pyodide.asm.mjs")).default;
  let M: any;
  return {
    _loadSnapshot: mem,
    _makeSnapshot: true,
    _snapshotDeserializer: deserializer(() => M),
    createPyodideModule: async (settings: any) => {
      M = await factory(settings);
      if (heapLen > M.HEAP8.length) {
        M.growMemory(heapLen);
        if (M.HEAP8.length < heapLen) {
          throw new Error(`could not grow the heap to ${heapLen} bytes`);
        }
      }
      return M;
    },
  };
}

/** Makes performance.now (Python's time.monotonic) continue from a checkpoint's clock. */
export function continueClock(at: number): void {
  const now = performance.now.bind(performance);
  const off = at - now();
  if (off > 0) performance.now = () => now() + off;
}

// The files' blob: "PYRUNFS1" | u32 header length | JSON header | file data.
// The header lists entries in walk order (a folder before its contents), the
// working directory, the roots and the open file descriptors.
interface Entry {
  p: string;
  t: "d" | "f" | "l";
  m: number;
  mt: number;
  n?: number;
  l?: string;
  i?: number; // inode: SQLite checks that an open database's file keeps it
}
interface Stream {
  fd: number;
  path: string;
  flags: number;
  pos: number;
}
const MAGIC = new TextEncoder().encode("PYRUNFS1");

function packFiles(FS: any, roots: string[], skip: string[]): Uint8Array {
  const entries: Entry[] = [];
  const datas: Uint8Array[] = [];
  let total = 0;
  const walk = (path: string) => {
    if (skip.includes(path)) return; // a mount: the host's, not the session's
    let st;
    try {
      st = FS.lstat(path);
    } catch {
      return;
    }
    const e: Entry = { p: path, t: "f", m: st.mode, mt: st.mtime.getTime(), i: st.ino };
    if (FS.isLink(st.mode)) {
      e.t = "l";
      e.l = FS.readlink(path);
    } else if (FS.isDir(st.mode)) {
      e.t = "d";
    } else if (!FS.isFile(st.mode)) {
      return;
    }
    if (e.t === "f") {
      const node = FS.lookupPath(path, { follow: false }).node;
      const c = node.contents;
      const data: Uint8Array = c
        ? (c.subarray ? c.subarray(0, node.usedBytes) : new Uint8Array(c))
        : FS.readFile(path);
      e.n = data.length;
      datas.push(data);
      total += data.length;
    }
    entries.push(e);
    if (e.t === "d") {
      for (const name of FS.readdir(path)) {
        if (name !== "." && name !== "..") walk(path.replace(/\/$/, "") + "/" + name);
      }
    }
  };
  for (const r of roots) walk(r);
  const streams: Stream[] = [];
  for (const s of FS.streams) {
    if (!s || s.fd < 3 || !s.path) continue;
    // Where the file is now: a stream's path is where it was opened, and a
    // session switched out has its folders renamed (sessions.ts).
    let path: string = s.path;
    try {
      if (s.node) path = FS.getPath(s.node);
    } catch { /* keep the path it was opened at */ }
    if (!roots.some((r) => path === r || path.startsWith(r + "/"))) continue;
    streams.push({ fd: s.fd, path, flags: s.flags, pos: s.position });
  }
  const header = new TextEncoder().encode(
    JSON.stringify({ entries, cwd: FS.cwd(), roots, streams }),
  );
  const out = new Uint8Array(MAGIC.length + 4 + header.length + total);
  out.set(MAGIC, 0);
  new DataView(out.buffer).setUint32(MAGIC.length, header.length, true);
  out.set(header, MAGIC.length + 4);
  let off = MAGIC.length + 4 + header.length;
  for (const d of datas) {
    out.set(d, off);
    off += d.length;
  }
  return out;
}

/**
 * Unpacks a files' blob into a restored process: the roots emptied, the
 * entries written, file inode numbers set, open descriptors reopened at
 * their numbers and positions, the working directory restored.
 */
export function restoreFiles(FS: any, blob: Uint8Array): void {
  for (let i = 0; i < MAGIC.length; i++) {
    if (blob[i] !== MAGIC[i]) throw new Error("the checkpoint's files are not a PYRUNFS1 blob");
  }
  const hl = new DataView(blob.buffer, blob.byteOffset).getUint32(MAGIC.length, true);
  const start = MAGIC.length + 4;
  const { entries, cwd, roots, streams } = JSON.parse(
    new TextDecoder().decode(blob.subarray(start, start + hl)),
  );
  let off = start + hl;
  for (const r of roots as string[]) rmTree(FS, r, true);
  for (const e of entries as Entry[]) {
    if (e.t === "d") {
      try {
        FS.mkdirTree(e.p);
      } catch { /* exists */ }
      FS.chmod(e.p, e.m & 0o7777);
    } else if (e.t === "l") {
      FS.symlink(e.l, e.p);
    } else {
      FS.writeFile(e.p, blob.subarray(off, off + e.n!));
      off += e.n!;
      FS.chmod(e.p, e.m & 0o7777);
      FS.utime(e.p, e.mt, e.mt);
    }
  }
  // Files only: a folder's id is part of its children's name hash.
  let max = 0;
  for (const e of entries as Entry[]) {
    if (e.i === undefined || e.t !== "f") continue;
    FS.lookupPath(e.p, { follow: false }).node.id = e.i;
    max = Math.max(max, e.i);
  }
  if (FS.nextInode <= max) FS.nextInode = max + 1;
  const O_CREAT = 0o100, O_TRUNC = 0o1000, O_EXCL = 0o200;
  for (const s of streams as Stream[]) {
    if (FS.streams[s.fd]) FS.close(FS.streams[s.fd]);
    let st;
    try {
      st = FS.open(s.path, s.flags & ~(O_CREAT | O_TRUNC | O_EXCL));
    } catch (e) {
      // A file unlinked while open has no path to reopen: its descriptor
      // is gone (EBADF on use), the rest of the state restores.
      console.error(`pyrun worker: descriptor ${s.fd} (${s.path}) not restored: ${e}`);
      continue;
    }
    if (st.fd !== s.fd) {
      FS.dupStream(st, s.fd);
      FS.close(st);
    }
    FS.streams[s.fd].position = s.pos;
  }
  try {
    FS.chdir(cwd);
  } catch { /* gone */ }
}

function rmTree(FS: any, root: string, keep = false): void {
  let st;
  try {
    st = FS.lstat(root);
  } catch {
    return;
  }
  if (FS.isDir(st.mode)) {
    for (const name of FS.readdir(root)) {
      if (name !== "." && name !== "..") rmTree(FS, root.replace(/\/$/, "") + "/" + name);
    }
    if (!keep) FS.rmdir(root);
  } else {
    FS.unlink(root);
  }
}

/** Writes a checkpoint to stdout: a JSON line with the sizes, then the bytes (docs/protocol.md). */
export function sendCheckpoint(id: string, c: Checkpoint): void {
  const line = new TextEncoder().encode(
    JSON.stringify({ type: "checkpoint", id, mem: c.mem.length, fs: c.fs.length, clock: c.clock }) +
      "\n",
  );
  for (const b of [line, c.mem, c.fs]) {
    let off = 0;
    while (off < b.length) off += Deno.stdout.writeSync(b.subarray(off));
  }
}

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
import type { ChunkSums } from "./chunks.ts";

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

/**
 * What makeCheckpoint gives: the memory snapshot and the files' blob, each
 * as the parts that make it up in order (views of the heap and of the
 * files' contents, not copies), and the clock then. The views are good
 * until Python runs again: sendCheckpoint writes them out at once.
 */
export interface Checkpoint {
  mem: Uint8Array[];
  fs: Uint8Array[];
  clock: number;
  /** An increment's (chunks.ts): its name, the one it is to, what it leaves out. */
  token?: string;
  since?: string;
  kept?: [number, number][];
  leftOut?: number;
}

/** The bytes in parts. */
export function partsLength(parts: Uint8Array[]): number {
  return parts.reduce((n, p) => n + p.length, 0);
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
 * Takes a checkpoint of py: memory and files. roots: the folders whose files
 * are kept. With chunks, an increment when it can be (chunks.ts): named,
 * and to since when since names the last one so taken.
 */
export function makeCheckpoint(
  py: PyodideInterface,
  roots: string[],
  skip: string[],
  chunks?: { sums: ChunkSums; since: string },
): Checkpoint {
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
  let mem: Uint8Array[];
  try {
    mem = snapshotParts(py, serializer(M));
  } finally {
    M.__hiwire_get = orig;
  }
  const c: Checkpoint = { mem, fs: packFiles(py.FS, roots, skip), clock: performance.now() };
  if (chunks) {
    const [header, heap] = mem;
    const inc = chunks.sums.increment(M.memory, heap, chunks.since);
    c.token = inc.token;
    if (inc.since) {
      c.mem = [header, ...inc.parts];
      c.since = inc.since;
      c.kept = inc.kept;
      c.leftOut = inc.leftOut;
    }
  }
  return c;
}

/**
 * Pyodide's memory snapshot of py as its two parts: the header (the
 * JavaScript state, some KiB) and the heap itself, a view of the module's
 * memory. makeMemorySnapshot copies the heap into one new array with the
 * header, which doubled the worker's memory while it took a checkpoint: a
 * session within its memory limit was killed by its own checkpoint (issue
 * 36). Its header alone is what it makes of an empty heap: it copies
 * Module.HEAP8 (after the header, the heap's offset in it) and reads
 * nothing else of it, and the JavaScript code that runs meanwhile (the
 * serializer) reads the heap through its own views, never Module.HEAP8.
 */
export function snapshotParts(py: PyodideInterface, ser: (obj: any) => unknown): Uint8Array[] {
  const M = (py as any)._module;
  const heap8 = M.HEAP8;
  let header: Uint8Array;
  M.HEAP8 = new Int8Array(0);
  try {
    header = (py as any).makeMemorySnapshot({ serializer: ser });
  } finally {
    // Unless the memory grew meanwhile (it then has new views).
    if (M.HEAP8.length === 0) M.HEAP8 = heap8;
  }
  if (header.length !== new Uint32Array(header.buffer, header.byteOffset, 2)[1]) {
    throw new Error("Pyodide's memory snapshot header is not what pyrun expects");
  }
  return [header, new Uint8Array(M.HEAP8.buffer, M.HEAP8.byteOffset, M.HEAP8.length)];
}

/**
 * A memory snapshot as a restore takes it: Pyodide's header (the JavaScript
 * state, some KiB), the heap's length, and fill, which puts the heap into
 * the wasm memory: copied from bytes in hand (snapshotSource), or read from
 * the checkpoint's file straight into the memory (checkpointFile).
 */
export interface SnapshotSource {
  header: Uint8Array;
  heapLen: number;
  fill(heap: Uint8Array): void;
}

/** The length of the header of a memory snapshot that starts bytes. */
function headerLength(bytes: Uint8Array): number {
  return new DataView(bytes.buffer, bytes.byteOffset).getUint32(4, true);
}

/** bytes, a whole memory snapshot, as a source. */
export function snapshotSource(bytes: Uint8Array): SnapshotSource {
  const hl = headerLength(bytes);
  return {
    header: bytes.subarray(0, hl),
    heapLen: bytes.length - hl,
    fill: (heap) => heap.set(bytes.subarray(hl)),
  };
}

/**
 * A parked restore's checkpoint file (mem bytes of memory snapshot, then fs
 * bytes of files): its header and files read now, its heap read by fill
 * straight into the wasm memory, with no 30 MiB or more buffer between and
 * no copy out of it (docs/performance.md, Restores and forks).
 */
export function checkpointFile(
  path: string,
  mem: number,
  fs: number,
): { source: SnapshotSource; files: Uint8Array<ArrayBuffer> } {
  const readAt = (f: Deno.FsFile, into: Uint8Array, pos: number) => {
    f.seekSync(pos, Deno.SeekMode.Start);
    for (let off = 0; off < into.length;) {
      const n = f.readSync(into.subarray(off));
      if (!n) throw new Error(`it ended after ${pos + off} bytes, not ${mem + fs}`);
      off += n;
    }
  };
  const f = Deno.openSync(path);
  let header: Uint8Array, files: Uint8Array<ArrayBuffer>;
  try {
    const actual = f.statSync().size;
    if (actual !== mem + fs) throw new Error(`it has ${actual} bytes, not ${mem + fs}`);
    const start = new Uint8Array(8);
    readAt(f, start, 0);
    const hl = headerLength(start);
    if (hl < 8 || hl > mem) throw new Error(`its snapshot header of ${hl} bytes does not fit`);
    header = new Uint8Array(hl);
    readAt(f, header, 0);
    files = new Uint8Array(fs);
    readAt(f, files, mem);
  } finally {
    f.close();
  }
  const fill = (heap: Uint8Array) => {
    const g = Deno.openSync(path);
    try {
      readAt(g, heap, header.length);
    } finally {
      g.close();
    }
  };
  return { source: { header, heapLen: mem - header.length, fill }, files };
}

/**
 * Options for loadPyodide that restore a memory snapshot (a checkpoint's,
 * or the base snapshot in a parked restore's warming): the heap grown to
 * the snapshot's size first (Pyodide restores into the module's own 30 MiB
 * memory and would fail on a larger heap), and JS values revived.
 *
 * Pyodide is given a stand-in of the snapshot's length (it takes the length
 * for the memory's initial size), and its restore the header alone after
 * the heap is filled in (fill): what Pyodide does with a snapshot's bytes,
 * in the same order. ahead (a parked restore's, src a promise): standIn,
 * the size of the base snapshot, whose heap no checkpoint's is smaller
 * than, is then given at once, and Pyodide instantiates its module and
 * runs Emscripten's start (the standard library's files, the runtime's
 * constructors) before the checkpoint comes, then calls instantiated:
 * 85-150 ms off the restore's path (docs/performance.md, Restores and
 * forks). Without it, Pyodide awaits src before it instantiates the
 * module, having loaded the rest.
 */
export async function restoreOptions(
  src: SnapshotSource | Promise<SnapshotSource>,
  indexURL: string,
  compiled?: Compiled,
  ahead?: { standIn: number; instantiated: () => void },
): Promise<Record<string, unknown>> {
  const factory = (await import(indexURL + "pyodide.asm.mjs")).default;
  let M: any;
  if (compiled) await compiled.module; // compiled while parked, off the restore's path
  return {
    _loadSnapshot: ahead
      ? new Uint8Array(ahead.standIn)
      : Promise.resolve(src).then((s) => new Uint8Array(s.header.length + s.heapLen)),
    _makeSnapshot: true,
    _snapshotDeserializer: deserializer(() => M),
    createPyodideModule: async (settings: any) => {
      if (compiled) useCompiled(await compiled.module, compiled.size);
      M = await factory(settings);
      // Parked: its memory written now, which the checkpoint's heap
      // overwrites whole, so that the kernel maps its pages before the
      // restore rather than in fill (30 MiB read in 20 ms, 5 once mapped).
      if (ahead) {
        M.HEAP8.fill(0);
        ahead.instantiated();
      }
      const s = await src;
      if (s.heapLen > M.HEAP8.length) {
        M.growMemory(s.heapLen);
        if (M.HEAP8.length < s.heapLen) {
          throw new Error(`could not grow the heap to ${s.heapLen} bytes`);
        }
      } else if (s.heapLen < M.HEAP8.length) {
        // A heap smaller than the stand-in's (a checkpoint from an older
        // base snapshot): the memory past it as a grown memory's would be.
        M.HEAP8.fill(0, s.heapLen);
      }
      const restore = M.API.restoreSnapshot;
      M.API.restoreSnapshot = () => {
        const state = restore(s.header); // checks and parses it; no heap in it to copy
        s.fill(new Uint8Array(M.HEAP8.buffer, 0, s.heapLen));
        return state;
      };
      return M;
    },
  };
}

/** What the Worker gets of the snapshot: its bytes, or why it cannot have them. */
export interface SnapshotRead {
  bytes?: Uint8Array<ArrayBuffer>;
  error?: string;
}

/**
 * Reads a snapshot file of a known size into one buffer: 5-10 ms for 31 MB,
 * where Deno.readFile, growing its buffer as it goes, takes 40-50 ms.
 */
export function readSnapshot(path: string, size: number): SnapshotRead {
  try {
    const f = Deno.openSync(path);
    try {
      const actual = f.statSync().size;
      if (actual !== size) throw new Error(`it has ${actual} bytes, not ${size}`);
      const bytes = new Uint8Array(size);
      let off = 0;
      while (off < size) {
        const n = f.readSync(bytes.subarray(off));
        if (!n) throw new Error(`it ended after ${off} bytes, not ${size}`);
        off += n;
      }
      return { bytes };
    } finally {
      f.close();
    }
  } catch (e) {
    return { error: e instanceof Error ? e.message : String(e) };
  }
}

/** Pyodide's wasm module compiled ahead (a parked restore's), and its file's size. */
export interface Compiled {
  module: Promise<WebAssembly.Module>;
  size: number;
}

/** Compiles Pyodide's wasm module from its file in indexURL. */
export function compilePyodide(indexURL: string): Compiled {
  const bytes = Deno.readFileSync(indexURL + "pyodide.asm.wasm");
  return { module: WebAssembly.compile(bytes), size: bytes.length };
}

/**
 * Makes the next WebAssembly.instantiate of Pyodide's module (the bytes of
 * its file, which Pyodide reads and instantiates itself, with imports of
 * its own making) instantiate the one compiled ahead instead: only the
 * instantiation is left on the restore's path, and V8 has had the time
 * parked to optimize the code. Any other instantiation goes through.
 */
function useCompiled(module: WebAssembly.Module, size: number): void {
  const instantiate = WebAssembly.instantiate;
  const substitute = async (source: unknown, imports?: WebAssembly.Imports) => {
    if (
      !ArrayBuffer.isView(source) && !(source instanceof ArrayBuffer) || source.byteLength !== size
    ) {
      return await (instantiate as (s: unknown, i?: WebAssembly.Imports) => Promise<unknown>)(
        source,
        imports,
      );
    }
    WebAssembly.instantiate = instantiate;
    return { instance: await instantiate(module, imports), module };
  };
  WebAssembly.instantiate = substitute as typeof WebAssembly.instantiate;
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

/** The files' blob of roots, as its header and the files' contents (views, not copies). */
function packFiles(FS: any, roots: string[], skip: string[]): Uint8Array[] {
  const entries: Entry[] = [];
  const datas: Uint8Array[] = [];
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
  const head = new Uint8Array(MAGIC.length + 4 + header.length);
  head.set(MAGIC, 0);
  new DataView(head.buffer).setUint32(MAGIC.length, header.length, true);
  head.set(header, MAGIC.length + 4);
  return [head, ...datas];
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

/**
 * Writes a checkpoint to stdout: a JSON line with the sizes, then the bytes
 * (docs/protocol.md), each part as it is, a MiB at a time: the supervisor
 * reads them as they come, and nothing here copies the heap.
 */
export function sendCheckpoint(id: string, c: Checkpoint): void {
  const mem = partsLength(c.mem), fs = partsLength(c.fs);
  const inc = c.since ? { since: c.since, kept: c.kept, left_out: c.leftOut } : {};
  const line = new TextEncoder().encode(
    JSON.stringify({
      type: "checkpoint",
      id,
      mem: mem + (c.leftOut ?? 0),
      fs,
      clock: c.clock,
      ...(c.token ? { token: c.token } : {}),
      ...inc,
    }) + "\n",
  );
  for (const part of [line, ...c.mem, ...c.fs]) {
    // A file's contents may be an Int8Array, which writeSync refuses.
    const b = new Uint8Array(part.buffer, part.byteOffset, part.byteLength);
    let off = 0;
    while (off < b.length) off += Deno.stdout.writeSync(b.subarray(off, off + (1 << 20)));
  }
}

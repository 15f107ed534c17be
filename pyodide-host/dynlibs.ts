// Side modules (native code: ctypes libraries, extension modules, a
// package's shared libraries) in checkpoints (docs/sessions.md, Native
// code). A memory snapshot holds their data but not what lives on the
// JavaScript side: their instances, the wasm function table's entries, the
// GOT, Emscripten's LDSO records of names and dlopen handles. A checkpoint
// records each side module the interpreter loaded (bytes, load order,
// memory base, table base, names, handles) and the table entries added
// since the worker was ready; a restore instantiates the same bytes again at
// the same bases after the memory restore (keeping the restored data), in
// the same order, and puts the table entries back at the same indices.
// Cloudflare's workerd (src/pyodide/internal/snapshot.ts) does the same for
// its Python Workers, before the memory restore.
// deno-lint-ignore-file no-explicit-any

/** A side module's instantiation, seen as it happened. */
interface Load {
  bytes: Uint8Array;
  memoryBase: number;
  tableBase: number;
  exports: Record<string, unknown>;
}

/** What a checkpoint keeps of one side module (bytes in a file of its own). */
interface LoadRecord {
  file: string;
  names: string[];
  handles: number[];
  global: boolean;
  memoryBase: number;
  tableBase: number;
}

/** The record of a checkpoint's side modules and table entries. */
export interface DynlibRecord {
  loads: LoadRecord[];
  table: number; // the table's length
  entries: [number, string, string][]; // index, library name, export
  free: number[];
}

/** The folder a checkpoint's side modules are kept in (in /tmp, whose files a checkpoint keeps). */
export const DYNLIB_DIR = "/tmp/.pyrun-dynlibs"; // in /tmp, a root of the files

/**
 * Starts watching side modules load: Emscripten instantiates them with a
 * "GOT.mem" import, and its env import answers their memory and table base.
 */
export function watchDynlibs(): Load[] {
  const loads: Load[] = [];
  const WA = WebAssembly as any;
  const bytesOf = new WeakMap<object, Uint8Array>();
  const note = (bytes: Uint8Array | undefined, info: any, instance: any) => {
    if (!info?.["GOT.mem"] || !bytes) return;
    loads.push({
      bytes: bytes.slice(),
      memoryBase: info.env.__memory_base,
      tableBase: info.env.__table_base,
      exports: instance.exports,
    });
  };
  const OrigModule = WA.Module, OrigInstance = WA.Instance, origInstantiate = WA.instantiate;
  const Mod = function (this: any, b: any) {
    const m = new OrigModule(b);
    if (ArrayBuffer.isView(b)) bytesOf.set(m, b as Uint8Array);
    return m;
  } as any;
  Object.setPrototypeOf(Mod, OrigModule);
  Mod.prototype = OrigModule.prototype;
  const Inst = function (this: any, m: any, info: any) {
    const i = new OrigInstance(m, info);
    note(bytesOf.get(m), info, i);
    return i;
  } as any;
  Object.setPrototypeOf(Inst, OrigInstance);
  Inst.prototype = OrigInstance.prototype;
  WA.Module = Mod;
  WA.Instance = Inst;
  WA.instantiate = async (src: any, info: any) => {
    const res = await origInstantiate.call(WA, src, info);
    if (res instanceof OrigInstance) note(bytesOf.get(src), info, res);
    else note(ArrayBuffer.isView(src) ? src as Uint8Array : undefined, info, res.instance);
    return res;
  };
  return loads;
}

/**
 * Writes the record of the side modules loaded since the worker was ready
 * into DYNLIB_DIR, or returns why they cannot be restored.
 */
export function saveDynlibs(M: any, loads: Load[], tableAtReady: number): string {
  const table = M.wasmTable;
  const libs = Object.entries(M.LDSO.loadedLibsByName as Record<string, any>);
  const recs: LoadRecord[] = [];
  const owner = new Map<unknown, [string, string]>(); // function -> library, export
  for (const [name, dso] of libs) {
    for (const [k, v] of Object.entries(dso.exports ?? {})) {
      if (typeof v === "function" && !owner.has(v)) owner.set(v, [name, k]);
    }
  }
  const ranges: [number, number][] = [];
  loads.forEach((l, i) => {
    const fn = Object.values(l.exports).find((v) => typeof v === "function");
    const names = libs.filter(([, d]) =>
      fn !== undefined && Object.values(d.exports ?? {}).includes(fn)
    ).map(([n]) => n);
    const dso = names.length ? M.LDSO.loadedLibsByName[names[0]] : undefined;
    const handles = Object.entries(M.LDSO.loadedLibsByHandle as Record<string, any>)
      .filter(([h, d]) => d === dso && h !== "0").map(([h]) => Number(h));
    recs.push({
      file: `${DYNLIB_DIR}/${i}.so`,
      names,
      handles,
      global: !!dso?.global,
      memoryBase: l.memoryBase,
      tableBase: l.tableBase,
    });
    ranges.push([l.tableBase, l.tableBase + (M.getDylinkMetadata(l.bytes).tableSize ?? 0)]);
  });
  const entries: [number, string, string][] = [];
  for (let i = tableAtReady; i < table.length; i++) {
    if (ranges.some(([a, b]) => i >= a && i < b)) continue;
    const f = table.get(i);
    if (!f) continue;
    const o = owner.get(f);
    if (!o) {
      return "the session made a JavaScript function callable from native code (a ctypes callback, say), which a checkpoint cannot restore";
    }
    entries.push([i, o[0], o[1]]);
  }
  try {
    M.FS.mkdir(DYNLIB_DIR);
  } catch { /* exists */ }
  loads.forEach((l, i) => M.FS.writeFile(recs[i].file, l.bytes));
  const rec: DynlibRecord = {
    loads: recs,
    table: table.length,
    entries,
    free: [...M.freeTableIndexes],
  };
  M.FS.writeFile(`${DYNLIB_DIR}/record.json`, JSON.stringify(rec));
  return "";
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** Removes DYNLIB_DIR (after a checkpoint is sent, or restored). */
export function dropDynlibs(M: any): void {
  try {
    for (const n of M.FS.readdir(DYNLIB_DIR)) {
      if (n !== "." && n !== "..") M.FS.unlink(`${DYNLIB_DIR}/${n}`);
    }
    M.FS.rmdir(DYNLIB_DIR);
  } catch { /* none */ }
}

/**
 * Loads a restored checkpoint's side modules again (its files restored,
 * its memory too): each instantiated at its memory and table base, its data
 * kept as the memory restore left it, registered under its names and
 * handles, and the table's other entries set again. Returns the loads, for
 * the next checkpoint of this process.
 */
export function restoreDynlibs(M: any): Load[] {
  const path = `${DYNLIB_DIR}/record.json`;
  // No record: the checkpoint's interpreter had loaded no native code. A
  // record that cannot be used fails the restore: the session without its
  // side modules would crash at its first call into them, and again after
  // each rollback to the same checkpoint.
  if (!M.FS.analyzePath(path).exists) return [];
  try {
    return loadAgain(M, checkRecord(new TextDecoder().decode(M.FS.readFile(path))));
  } catch (e) {
    throw new Error(`the checkpoint's native code could not be loaded again: ${messageOf(e)}`);
  }
}

/** The DynlibRecord in text, if it is one; else throws saying the record is damaged. */
function checkRecord(text: string): DynlibRecord {
  let rec: any;
  try {
    rec = JSON.parse(text);
  } catch (e) {
    throw new Error(`its record is damaged (${messageOf(e)})`);
  }
  const int = (v: unknown) => Number.isSafeInteger(v) && (v as number) >= 0;
  const str = (v: unknown) => typeof v === "string";
  const every = (v: unknown, f: (x: any) => boolean) => Array.isArray(v) && v.every(f);
  const load = (l: any) =>
    str(l?.file) && every(l.names, str) && every(l.handles, int) &&
    typeof l.global === "boolean" && int(l.memoryBase) && int(l.tableBase);
  if (
    !every(rec?.loads, load) || !int(rec.table) || !every(rec.free, int) ||
    !every(rec.entries, (e) => Array.isArray(e) && int(e[0]) && str(e[1]) && str(e[2]))
  ) {
    throw new Error("its record is damaged (not the shape pyrun writes)");
  }
  return rec as DynlibRecord;
}

/** Loads rec's side modules again and sets the table's entries (restoreDynlibs). */
function loadAgain(M: any, rec: DynlibRecord): Load[] {
  const table = M.wasmTable;
  const loads: Load[] = [];
  // The entries below limit whose functions are loaded already go back
  // before the next module loads: the module's GOT then finds them where
  // the checkpointed process had them, as it did, instead of adding more.
  const done = new Set<number>();
  const fill = (limit: number) => {
    if (table.length < limit) table.grow(limit - table.length);
    for (const [i, lib, sym] of rec.entries) {
      const f = M.LDSO.loadedLibsByName[lib]?.exports?.[sym];
      if (i >= limit || done.has(i) || typeof f !== "function") continue;
      M.setWasmTableEntry(i, f);
      M.updateTableMap(i, 1);
      done.add(i);
    }
    // The rest, of modules not loaded yet, were slots Emscripten handed
    // out (addFunction, perhaps from its free list) while loading them:
    // offered again, lowest first, so the same loads take the same slots.
    const open = rec.entries.map(([i]) => i).filter((i) =>
      i < limit && !done.has(i) && !M.freeTableIndexes.includes(i)
    );
    M.freeTableIndexes.push(...open.sort((a, b) => b - a));
  };
  for (const r of rec.loads) {
    try {
      loads.push(loadOne(M, r, table, fill));
    } catch (e) {
      throw new Error(`side module ${r.names[0] ?? r.file}: ${messageOf(e)}`);
    }
  }
  fill(rec.table);
  for (const [i, lib, sym] of rec.entries) {
    if (!done.has(i)) throw new Error(`table entry ${i}: ${lib} has no function ${sym}`);
  }
  M.freeTableIndexes.length = 0;
  M.freeTableIndexes.push(...rec.free);
  dropDynlibs(M);
  return loads;
}

/** Instantiates the side module r records again, at its bases, keeping its data (loadAgain). */
function loadOne(M: any, r: LoadRecord, table: any, fill: (limit: number) => void): Load {
  const bytes: Uint8Array = M.FS.readFile(r.file);
  const meta = M.getDylinkMetadata(bytes);
  if (meta.tableSize) fill(r.tableBase);
  if (meta.tableSize) {
    if (table.length > r.tableBase) {
      throw new Error(`table base ${r.tableBase} is taken (table of ${table.length})`);
    }
    table.grow(r.tableBase - table.length);
    table.grow(meta.tableSize);
  }
  const kept = M.HEAPU8.slice(r.memoryBase, r.memoryBase + meta.memorySize);
  const own: { exports?: any } = {}; // its exports, once instantiated
  const env = new Proxy({} as Record<string | symbol, unknown>, {
    get(stubs, prop) {
      if (prop === "__memory_base") return r.memoryBase;
      if (prop === "__table_base") return r.tableBase;
      const g = M.resolveGlobalSymbol(prop).sym;
      if (g) return g;
      if (!(prop in stubs)) {
        let f: any;
        stubs[prop] = (...a: unknown[]) => {
          f ||= own.exports?.[prop as string];
          if (!f) throw new Error(`Dynamic linking error: cannot resolve symbol ${String(prop)}`);
          return f(...a);
        };
      }
      return stubs[prop];
    },
  });
  const GOT = new Proxy(meta.weakImports, M.GOTHandler);
  const inst = new WebAssembly.Instance(
    new WebAssembly.Module(bytes as Uint8Array<ArrayBuffer>),
    {
      "GOT.mem": GOT,
      "GOT.func": GOT,
      env,
      wasi_snapshot_preview1: env,
    } as any,
  );
  M.HEAPU8.set(kept, r.memoryBase); // the data is the checkpoint's, not the module's initial
  M.updateTableMap(r.tableBase, meta.tableSize);
  const exports = own.exports = M.relocateExports(inst.exports, r.memoryBase);
  M.updateGOT(exports);
  try {
    M.reportUndefinedSymbols();
  } catch { /* resolved on first use, as Pyodide loads with allowUndefined */ }
  const dso = M.newDSO(r.names[0], undefined, exports);
  dso.global = r.global;
  if (r.global) M.mergeLibSymbols(exports, r.names[0]);
  for (const n of r.names) M.LDSO.loadedLibsByName[n] = dso;
  for (const h of r.handles) M.LDSO.loadedLibsByHandle[h] = dso;
  return { bytes, memoryBase: r.memoryBase, tableBase: r.tableBase, exports: inst.exports };
}

// The Worker of the JavaScript engine that runs the user's code, with no
// Deno permissions at all (main.ts starts it with permissions "none"), with
// --mount folders too: the host reads and writes those for it. The
// host loads this file as a blob: module, so it imports nothing at run time
// (the type import below is erased). Everything the code can do beyond plain
// JavaScript goes through postMessage to the host: console output, the
// `pyrun` API (files, displays), the value of the last expression.
//
// What this module needs from the global scope it takes before any user code
// runs, and it hides what would let the code talk to the host or the pipes
// around it (postMessage, close, Deno.stdin/stdout/stderr, Deno's internals).
// The host still checks every message: this module is best effort, the
// host's checks are the rule.

/// <reference lib="deno.worker" />

import type { Caps, FromRunner, Mount, ToRunner } from "./protocol.ts";

/** Keep in step with rewrite.ts's VALUE_EXPORT. */
const VALUE_EXPORT = "__pyrun_value__";
const MAX_DEPTH = 200;

type Msg = FromRunner extends infer T ? T extends unknown ? Omit<T, "k"> : never : never;

// deno-lint-ignore no-explicit-any
const DenoAny = Deno as any;
const internal = DenoAny[DenoAny.internal];
const DenoConsole = internal.Console as new (
  print: (msg: string, level: number) => void,
) => Console;
const rawPost = self.postMessage.bind(self);
const realExit = Deno.exit.bind(Deno);
const inspect = Deno.inspect.bind(Deno);
const listen = self.addEventListener.bind(self);
const { createObjectURL, revokeObjectURL } = URL;
// A session's code may replace globals; the runner keeps its own.
const BlobClass = Blob;
const define = Object.defineProperty;
const describe = Object.getOwnPropertyDescriptor;
const apply = Reflect.apply;
const includes = String.prototype.includes;
const stringify = JSON.stringify;
const parseJSON = JSON.parse;
const rawJSON = (JSON as unknown as { rawJSON(text: string): unknown }).rawJSON;
// What onHost needs, taken before the code could replace it.
const wait = Atomics.wait;
const atomicLoad = Atomics.load;
const SAB = SharedArrayBuffer;
const encoder = new TextEncoder();
const decoder = new TextDecoder();
const here = import.meta.url;

let token = "";
function post(m: Msg): void {
  rawPost({ ...m, k: token });
}

interface CallState {
  seq: number;
  caps: Caps;
  sent: { stdout: number; stderr: number };
  dropped: { stdout: number; stderr: number };
  displays: number;
  displayBytes: number;
  displaysDropped: number;
  uncaught: unknown[];
}

/** The running call; null between calls (output then is dropped). */
let call: CallState | null = null;

function print(msg: string, level: number): void {
  const c = call;
  if (!c) return;
  // Deno's own console sends levels above 1 (warn, error, trace) to stderr.
  const stream = level > 1 ? "stderr" : "stdout";
  const room = c.caps.max_output - c.sent[stream];
  if (msg.length > room) {
    c.dropped[stream] += msg.length - Math.max(room, 0);
    if (room <= 0) return;
    msg = msg.slice(0, room);
  }
  c.sent[stream] += msg.length;
  post({ type: "output", seq: c.seq, stream, text: msg });
}

const userConsole = new DenoConsole(print);

// The code's files: inputs by relative path, outputs by path under /output/.
const inputs = new Map<string, Uint8Array>();
const outputs = new Map<string, Uint8Array>();
let changed = new Set<string>();

function outputName(path: string): string | null {
  if (typeof path !== "string" || !path.startsWith("/output/")) return null;
  const rel = path.slice("/output/".length);
  const parts = rel.split("/");
  if (!rel || parts.some((p) => p === "" || p === "." || p === "..")) return null;
  return rel;
}

/** Linux's NAME_MAX: no name in a path may be longer, in UTF-8 bytes (Python's and R's rule too). */
const NAME_MAX = 255;

function nameTooLong(path: string): boolean {
  return path.split("/").some((p) => encoder.encode(p).length > NAME_MAX);
}

/** How long a file operation on a mounted folder waits for the host. */
const HOST_WAIT_MS = 60_000;
/** The most bytes the host hands back for one operation (a file's). */
const HOST_MAX_BYTES = 1 << 30;

/**
 * Runs a file operation on a mounted folder in the host, and waits for it
 * (docs/protocol.md, Engines: JavaScript): the Worker has no permission for the
 * mounted folders at all. With one, the code could open a host file and
 * change its mode or owner (node:fs's fchmod and fchown reach Deno's
 * operations directly, and Deno checks no permission for them on a file
 * opened for reading): setuid or world-writable files on the host. The
 * host answers in a growable shared buffer: Int32 [0] 1 once answered,
 * [1] 1 for an error, [2] the length of what follows from byte 16, the
 * result or the error's text. An error names the sandbox path and the
 * reason, never the host path.
 */
function onHost(what: string, op: "read" | "readDir" | "write", path: string, data?: Uint8Array) {
  const answer = new SAB(16, { maxByteLength: 16 + HOST_MAX_BYTES });
  const state = new Int32Array(answer, 0, 4);
  post({ type: "fs", op, path, ...(data ? { data } : {}), answer });
  if (wait(state, 0, 0, HOST_WAIT_MS) === "timed-out") {
    throw new Error(`${what}: ${path}: the worker did not answer`);
  }
  const bytes = new Uint8Array(answer, 16, atomicLoad(state, 2)).slice();
  if (atomicLoad(state, 1)) throw new Error(`${what}: ${path}: ${decoder.decode(bytes)}`);
  return bytes;
}

/** The host folders of --mount (init), seen at their sandbox paths. */
let mounts: Mount[] = [];

/**
 * Where a sandbox path under a mount is on the host, with its mount; null
 * for a path under none. The path is resolved as POSIX does ("." and ".."
 * taken away, never above "/"), so no path leaves its mount's folder by
 * name; the host resolves it again.
 */
function mounted(path: unknown): { host: string; mount: Mount } | null {
  if (typeof path !== "string" || !path.startsWith("/")) return null;
  const parts: string[] = [];
  for (const p of path.split("/")) {
    if (p === "" || p === ".") continue;
    if (p === "..") parts.pop();
    else parts.push(p);
  }
  const clean = "/" + parts.join("/");
  for (const m of mounts) {
    if (clean === m.path || clean.startsWith(m.path + "/")) {
      return { host: m.host + clean.slice(m.path.length), mount: m };
    }
  }
  return null;
}

function inputName(path: string): string {
  return String(path).replace(/^(\.\/)+/, "");
}

function bytesOf(data: unknown, what: string): Uint8Array {
  if (typeof data === "string") return encoder.encode(data);
  if (data instanceof Uint8Array) return data.slice();
  if (data instanceof ArrayBuffer) return new Uint8Array(data.slice(0));
  if (ArrayBuffer.isView(data)) {
    return new Uint8Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
  }
  throw new TypeError(`${what}: data must be a string, a Uint8Array or an ArrayBuffer`);
}

const MIME = /^[A-Za-z0-9][\w.+-]*\/[\w.+-]+$/;

/** The API the code has instead of a file system (docs/protocol.md, Engines: JavaScript). */
const pyrun = Object.freeze({
  /**
   * The bytes of an input file (a path relative to the working folder), of
   * an output under /output/, or of a file in a mounted folder.
   */
  readFile(path: string): Uint8Array {
    const at = mounted(path);
    if (at) return onHost("pyrun.readFile", "read", path);
    const out = outputName(path);
    const bytes = out !== null ? outputs.get(out) : inputs.get(inputName(path));
    if (!bytes) throw new Error(`pyrun.readFile: no such file: ${path}`);
    return bytes.slice();
  },
  readTextFile(path: string): string {
    return decoder.decode(pyrun.readFile(path));
  },
  /**
   * Writes a file under /output/, which the call returns when it ends, or
   * into a folder mounted writable (its parent folders made).
   */
  writeFile(path: string, data: string | Uint8Array | ArrayBuffer): void {
    const at = mounted(path);
    if (at) {
      const bytes = bytesOf(data, "pyrun.writeFile");
      if (!at.mount.rw) {
        throw new Error(`pyrun.writeFile: ${path}: ${at.mount.path} is mounted read-only`);
      }
      onHost("pyrun.writeFile", "write", path, bytes);
      return;
    }
    if (typeof path === "string" && nameTooLong(path)) {
      throw new TypeError(
        `pyrun.writeFile: ${stringify(path)} has a name longer than ${NAME_MAX} bytes`,
      );
    }
    const name = outputName(path);
    if (name === null) {
      throw new TypeError(
        `pyrun.writeFile: ${stringify(path)} is not a file under /output/ (write "/output/name")` +
          (mounts.some((m) => m.rw) ? " or in a writable mounted folder" : ""),
      );
    }
    outputs.set(name, bytesOf(data, "pyrun.writeFile"));
    changed.add(name);
  },
  /** The input files and the files under /output/, sorted. */
  files(): string[] {
    return [...inputs.keys(), ...[...outputs.keys()].map((p) => "/output/" + p)].sort();
  },
  /** The names in a mounted folder, sorted; a folder's name ends in "/". */
  readDir(path: string): string[] {
    const at = mounted(path);
    if (!at) throw new Error(`pyrun.readDir: ${stringify(path)} is not in a mounted folder`);
    return parseJSON(decoder.decode(onHost("pyrun.readDir", "readDir", path)));
  },
  /**
   * Shows data with a mime type: a string (sent as UTF-8) or bytes. Without
   * a mime type a string is text/plain and any other value its JSON.
   */
  display(data: unknown, mimeType?: string): void {
    const c = call;
    if (!c) return;
    let mime = mimeType;
    let bytes: Uint8Array;
    if (mime === undefined) {
      if (typeof data === "string") {
        mime = "text/plain";
        bytes = encoder.encode(data);
      } else {
        mime = "application/json";
        bytes = encoder.encode(toJSON(data) ?? "null");
      }
    } else {
      if (typeof mime !== "string" || mime.length > 255 || !MIME.test(mime)) {
        throw new TypeError(`pyrun.display: ${stringify(mime)} is not a mime type`);
      }
      bytes = bytesOf(data, "pyrun.display");
    }
    if (
      c.displays >= c.caps.max_displays || c.displayBytes + bytes.length > c.caps.max_display_bytes
    ) {
      c.displaysDropped++;
      return;
    }
    c.displays++;
    c.displayBytes += bytes.length;
    post({ type: "display", seq: c.seq, mime_type: mime, data: bytes });
  },
});

/** Ends the worker as the code asked, telling the host first. */
function exitCall(how: string, code: unknown): never {
  const c = call;
  if (c) post({ type: "exit", seq: c.seq, how, code: Number(code) | 0 });
  realExit(Number(code) | 0);
  throw new Error("unreachable"); // Deno.exit does not return
}

function install(): void {
  define(globalThis, "console", {
    value: userConsole,
    writable: true,
    configurable: true,
  });
  define(globalThis, "pyrun", { value: pyrun, writable: true, configurable: true });
}

// ---- Deno's lazy globals ---------------------------------------------------
//
// Deno builds its Node compatibility layer (`process`, `setTimeout`, ...) the
// first time one of these globals is read: ~20 ms of CPU, which was most of a
// fresh Worker's own start-up. The runner reads none of them before the code
// does: it puts an accessor of its own in front of each, which guards
// `process` (or notes the timers) when the code first reads it. Code that
// imports anything (`node:process` gives the same object) has them read and
// guarded before it runs. In a session the guard may run after earlier code
// replaced built-ins (Array iterators, String and RegExp methods), so this
// part uses only what the runner took at its start: no loops over arrays, no
// methods looked up at the time.

type LazyGlobal = { get: () => unknown; seen: (v: unknown) => void; done: boolean };
const lazyGlobals: LazyGlobal[] = [];
/** Whether the code has read a timer global: then the call's end waits for a timer too. */
let timersRead = false;

function onFirstRead(name: string, seen: (v: unknown) => void): void {
  const d = describe(globalThis, name);
  if (!d) return;
  const settle = (v: unknown) =>
    define(globalThis, name, {
      value: v,
      writable: true,
      configurable: true,
      enumerable: d.enumerable,
    });
  if (!d.get) return seen(d.value);
  const lazy: LazyGlobal = { get: d.get, seen, done: false };
  lazyGlobals.push(lazy);
  define(globalThis, name, {
    get() {
      const v = readLazy(lazy);
      settle(v);
      return v;
    },
    set: settle,
    configurable: true,
    enumerable: d.enumerable,
  });
}

function readLazy(lazy: LazyGlobal): unknown {
  const v = apply(lazy.get, globalThis, []);
  if (!lazy.done) {
    lazy.done = true;
    lazy.seen(v);
  }
  return v;
}

/** Whether code may import (a module, node:process among them): a word in its text is enough. */
function mayImport(code: string): boolean {
  return apply(includes, code, ["import"]) || apply(includes, code, ["require"]);
}

/** Before code that may import: what it can reach through a module is guarded already. */
function readLazyGlobals(): void {
  for (let i = 0; i < lazyGlobals.length; i++) {
    if (!lazyGlobals[i].done) readLazy(lazyGlobals[i]);
  }
}

function refuse(proc: object, name: string): void {
  define(proc, name, {
    get() {
      throw new Error(`process.${name} is not available in pyrun: use console and pyrun.writeFile`);
    },
    configurable: true,
  });
}

function guardProcess(p: unknown): void {
  if (typeof p !== "object" || p === null) return;
  define(p, "exit", {
    value: (code?: number) => exitCall(`process.exit(${code ?? ""})`, code ?? 0),
    writable: true,
    configurable: true,
  });
  refuse(p, "stdin");
  refuse(p, "stdout");
  refuse(p, "stderr");
}

// One macrotask without Deno's timers (which would build the Node layer):
// a message to a channel of the runner's own.
const tick = new MessageChannel();
const tickPost = tick.port1.postMessage.bind(tick.port1);
const ticks: Record<number, () => void> = Object.create(null);
let tickHead = 0;
let tickTail = 0;
tick.port2.onmessage = () => {
  const f = ticks[tickHead];
  delete ticks[tickHead++];
  f?.();
};

function nextTask(): Promise<void> {
  return new Promise((r) => {
    ticks[tickTail++] = r;
    tickPost(0);
  });
}

function hide(): void {
  const g = globalThis as unknown as Record<string, unknown>;
  delete g.postMessage;
  // The host's --expose-gc reaches every isolate: the code has no use for
  // it. V8 makes it non-configurable (delete would throw) but writable.
  g.gc = undefined;
  // A nested Worker's console would write to the process's stdout, the
  // protocol pipe (its permissions could only be "none" too).
  g.Worker = class {
    constructor() {
      throw new TypeError("pyrun: the code cannot start Workers");
    }
  };
  g.close = () => exitCall("self.close()", 0);
  DenoAny.exit = (code?: number) => exitCall(`Deno.exit(${code ?? ""})`, code ?? 0);
  for (const name of ["stdin", "stdout", "stderr"]) delete DenoAny[name];
  delete DenoAny[DenoAny.internal];
  onFirstRead("process", guardProcess);
  for (const name of ["setTimeout", "setInterval", "setImmediate"]) {
    onFirstRead(name, () => timersRead = true);
  }
}

/** Deno's own setTimeout, read through its lazy getter (the code may have replaced the global). */
const realSetTimeout = (() => {
  const d = describe(globalThis, "setTimeout");
  return () => (d?.get ? apply(d.get, globalThis, []) : d?.value) as typeof setTimeout;
})();

// ---- values ---------------------------------------------------------------

/** Kinds of object whose JSON would say nothing: they become their inspect() text. */
function opaque(v: object): boolean {
  return v instanceof Error || v instanceof Promise || v instanceof RegExp ||
    v instanceof WeakMap || v instanceof WeakSet || v instanceof ArrayBuffer ||
    v instanceof DataView || (typeof WeakRef !== "undefined" && v instanceof WeakRef);
}

function jsonable(v: unknown, depth: number, seen: Set<object>): unknown {
  switch (typeof v) {
    case "undefined":
    case "boolean":
    case "string":
      return v;
    case "number":
      if (Number.isFinite(v)) return v;
      return Number.isNaN(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity";
    case "bigint":
      return rawJSON(v.toString());
    case "symbol":
    case "function":
      return inspect(v);
  }
  if (v === null) return null;
  const o = v as object;
  if (depth > MAX_DEPTH) return inspect(o, { depth: 0 });
  if (seen.has(o)) return "<cycle>";
  if (opaque(o)) return inspect(o);
  if (o instanceof Number || o instanceof String || o instanceof Boolean) return o.valueOf();
  seen.add(o);
  try {
    const d = depth + 1;
    const toJSONMethod = (o as { toJSON?: unknown }).toJSON;
    if (typeof toJSONMethod === "function") return jsonable(toJSONMethod.call(o, ""), d, seen);
    if (Array.isArray(o)) return o.map((x) => jsonable(x, d, seen) ?? null);
    if (ArrayBuffer.isView(o)) {
      return Array.from(o as unknown as ArrayLike<unknown>, (x) => jsonable(x, d, seen));
    }
    if (o instanceof Set) return [...o].map((x) => jsonable(x, d, seen) ?? null);
    if (o instanceof Map) {
      const out: Record<string, unknown> = {};
      for (const [k, x] of o) {
        const key = typeof k === "string" ? k : stringify(jsonable(k, d, seen)) ?? String(k);
        out[key] = jsonable(x, d, seen);
      }
      return out;
    }
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(o)) out[k] = jsonable((o as Record<string, unknown>)[k], d, seen);
    return out;
  } finally {
    seen.delete(o);
  }
}

/** The JSON text of a value, indented; undefined for undefined. */
function toJSON(v: unknown): string | undefined {
  return stringify(jsonable(v, 0, new Set()), null, 2);
}

// ---- errors ---------------------------------------------------------------

/** An error as the user reads it: Deno's text, with main.ts for the code and without pyrun's frames. */
function formatError(e: unknown, url: string): string {
  let text: string;
  try {
    text = e instanceof Error ? inspect(e) : `Uncaught ${inspect(e)}`;
  } catch {
    text = "Uncaught exception (it could not be shown)";
  }
  text = text.replaceAll(url, "main.ts");
  const kept: string[] = [];
  for (const line of text.split("\n")) {
    if (!/^\s+at /.test(line) || !(line.includes("ext:") || line.includes(here))) {
      kept.push(line);
    } else if (line.endsWith(" {") && kept.length) {
      // Deno puts the opening of the error's own properties on its last frame.
      kept[kept.length - 1] += " {";
    }
  }
  return kept.join("\n");
}

// ---- calls ----------------------------------------------------------------

async function run(m: Extract<ToRunner, { type: "run" }>): Promise<void> {
  const c: CallState = {
    seq: m.seq,
    caps: m.caps,
    sent: { stdout: 0, stderr: 0 },
    dropped: { stdout: 0, stderr: 0 },
    displays: 0,
    displayBytes: 0,
    displaysDropped: 0,
    uncaught: [],
  };
  call = c;
  install();
  if (!m.keep_output) outputs.clear();
  changed = new Set();
  for (const [p, b] of m.inputs) inputs.set(p, b);
  const url = createObjectURL(new BlobClass([m.code], { type: "application/typescript" }));
  let status: "success" | "run-error" = "success";
  let value: string | undefined;
  let error: string | undefined;
  try {
    if (mayImport(m.code)) readLazyGlobals();
    const ns = await import(url);
    // One macrotask, so that a promise the code rejected and left unhandled
    // is reported as this call's error; a timer of 0 ms if the code may have
    // set timers, so that one it set for 0 ms runs first, during the call.
    if (timersRead) await new Promise((r) => realSetTimeout()(r, 0));
    else await nextTask();
    if (c.uncaught.length) {
      status = "run-error";
      error = formatError(c.uncaught[0], url);
    } else if (VALUE_EXPORT in ns) {
      try {
        value = toJSON(ns[VALUE_EXPORT]);
      } catch (e) {
        status = "run-error";
        error = `pyrun: the value of the last expression could not be turned into JSON: ${
          formatError(e, url)
        }`;
      }
    }
  } catch (e) {
    status = "run-error";
    error = formatError(e, url);
  } finally {
    revokeObjectURL(url);
  }
  if (call !== c) return; // the host gave up on this call
  call = null;
  const files: [string, Uint8Array][] = [];
  let bytes = 0;
  let filesDropped = 0;
  for (const p of [...changed].sort()) {
    const b = outputs.get(p)!;
    if (files.length >= m.caps.max_files || bytes + b.length > m.caps.max_file_bytes) {
      filesDropped++;
      continue;
    }
    bytes += b.length;
    files.push([p, b]);
  }
  if (!m.keep_output) outputs.clear();
  post({
    type: "result",
    seq: c.seq,
    status,
    ...(value !== undefined ? { value } : {}),
    ...(error !== undefined ? { error } : {}),
    dropped: c.dropped,
    files,
    displays_dropped: c.displaysDropped,
    files_dropped: filesDropped,
  });
}

listen("error", (e) => {
  // An exception thrown by a callback (a timer) of the code: the call's
  // error if one runs, else dropped; never the end of the worker.
  e.preventDefault();
  call?.uncaught.push(e.error ?? e.message);
});

listen("unhandledrejection", (e) => {
  e.preventDefault();
  call?.uncaught.push(e.reason);
});

listen("message", (e: MessageEvent<ToRunner>) => {
  const m = e.data;
  switch (m?.type) {
    case "init":
      if (token) return;
      token = m.token;
      mounts = Array.isArray(m.mounts) ? m.mounts : [];
      post({ type: "ready" });
      return;
    case "run":
      if (!token) return;
      run(m);
      return;
    case "probe":
      post({ type: "alive", n: m.n });
      return;
    case "abandon":
      if (call?.seq === m.seq) call = null;
      return;
  }
});

hide();
install();
